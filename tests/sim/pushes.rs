//! The turn listeners' pushes (`src/redlock/guard/turns.rs`), as the world carries them: what a waiter's grant by
//! push (`wait/handoff.rs`, "The grant by push") counts.
//!
//! A client that waits in the nodes' queue registers its engine's listener ([`World::listen`]): the library's own
//! bookkeeping of handed markers (`muxlock::redlock::sim::Listener`), under the prefix its waiter ids start with.
//! The world keeps, per client and node, the listener connection's **session**: a number that moves each time the
//! connection is set up again, and none while it is down. It goes down when the node goes down (it comes back
//! after the node does), when a partition of the client's link ends (the lock connection resets then: so does
//! this one), when a push would arrive during a partition, and as the world's [`Plan`] draws: now and then as a
//! push would be taken (the push is lost with it), or at some instant between a hand-off and its push.
//!
//! Each handed marker a node writes (a release's hand-off, [`Node::markers`](super::node::Node::markers)) is pushed
//! to the listener whose prefix its waiter id starts with, in the session that listener's connection to that node
//! is in as the node writes it, after a drawn delay and in order on that connection; it is taken only if the
//! connection is still in that session when it arrives, and then with that session, as the listener's thread
//! reads the session after it takes a push. A marker written while the connection is down is never pushed.

use bytes::Bytes;
use muxlock::redlock::sim::Listener;

use super::node::{MS, Time};
use super::{Event, Rng, World};

/// How one world's listener connections carry pushes, drawn from a stream of the seed's own.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The delay of a push, from the node's write to the listener's read (a connection of its own: not the lock
    /// connection's latency).
    pub delay: (Time, Time),
    /// Probability and upper bound of a late push (a descheduled listener thread, a slow link).
    pub late: (f64, Time),
    /// Probability that the listener connection drops as a push would be taken (the push is lost).
    pub lost: f64,
    /// Probability that the listener connection drops at some instant between a node's write and its push.
    pub gap: f64,
}

impl Plan {
    /// A world's plan for `seed`.
    pub fn draw(seed: u64) -> Plan {
        let mut rng = Rng::new(seed ^ 0x7075_7368);
        let lo = rng.range(20_000, 500_000);
        Plan {
            delay: (lo, lo + rng.range(0, 3 * MS)),
            late: (
                [0.0, 0.02, 0.1][rng.range(0, 2) as usize],
                rng.range(20, 200) * MS,
            ),
            lost: [0.0, 0.01, 0.05][rng.range(0, 2) as usize],
            gap: [0.0, 0.02, 0.1][rng.range(0, 2) as usize],
        }
    }

    /// Directed histories: every push comes 0.1 ms after its write, or after the link's fixed latency
    /// (`World::fix_link`), and none is lost.
    pub fn steady() -> Plan {
        Plan {
            delay: (MS / 10, MS / 10),
            late: (0.0, 0),
            lost: 0.0,
            gap: 0.0,
        }
    }
}

/// The listeners of one world.
#[derive(Debug)]
pub struct Listening {
    pub plan: Plan,
    rng: Rng,
    /// Per client: its engine's listener, once registered, and its connection to each node.
    ears: Vec<Option<Ear>>,
}

#[derive(Debug)]
struct Ear {
    listener: Listener,
    conns: Vec<Conn>,
}

/// A listener's connection to one node.
#[derive(Debug, Default)]
struct Conn {
    /// The session it is in, if set up.
    session: Option<u64>,
    /// Sessions it has had.
    made: u64,
    /// When the last push on it arrives (pushes keep their order on a connection).
    last: Time,
    /// A set-up is on its way.
    dialling: bool,
}

impl Listening {
    /// No listener yet, for `clients` clients, pushes carried as `plan` says.
    pub fn new(seed: u64, clients: usize, plan: Plan) -> Listening {
        Listening {
            plan,
            rng: Rng::new(seed ^ 0x6c69_7374_656e),
            ears: (0..clients).map(|_| None).collect(),
        }
    }
}

/// What [`World::push_to`] does with a push on its way (the event's fields).
#[derive(Debug)]
pub struct Push {
    pub client: usize,
    pub node: usize,
    pub session: u64,
    pub key: Bytes,
}

impl World {
    /// Client `client`'s engine listens with `listener` from now on: its connection to each node is set up
    /// after a connect's time (a node that is down: once it is back).
    pub fn listen(&mut self, client: usize, listener: Listener) {
        let n = self.nodes.len();
        self.listening.ears[client] = Some(Ear {
            listener,
            conns: (0..n).map(|_| Conn::default()).collect(),
        });
        for node in 0..n {
            self.redial(client, node, 0);
        }
    }

    /// Per node, the session client `client`'s listener connection is in now (`None`: not set up): what a
    /// waiter notes before an attempt (the library's `Turns::armed`), and what it holds those against after.
    pub fn sessions(&self, client: usize) -> Vec<Option<u64>> {
        match &self.listening.ears[client] {
            Some(ear) => ear.conns.iter().map(|c| c.session).collect(),
            None => Vec::new(),
        }
    }

    /// Pushes the handed markers `node` just wrote to the listeners whose prefix they start with.
    pub(super) fn push_markers(&mut self, node: usize) {
        let markers = std::mem::take(&mut self.nodes[node].node.markers);
        for key in markers {
            self.struck.pushes[0] += 1;
            // `muxlock:turn:` then the waiter id, whose first 8 hex digits are its manager's prefix.
            let prefix = (key.get(13..21))
                .and_then(|p| std::str::from_utf8(p).ok())
                .and_then(|p| u32::from_str_radix(p, 16).ok());
            let Some(client) = prefix.and_then(|p| {
                (self.listening.ears.iter())
                    .position(|e| e.as_ref().is_some_and(|e| e.listener.prefix() == p))
            }) else {
                continue;
            };
            let Some(session) = self.conn(client, node).session else {
                // Not set up: nothing is pushed of what changes meanwhile.
                self.struck.pushes[2] += 1;
                continue;
            };
            let plan = &self.listening.plan;
            let (delay, late) = (plan.delay, plan.late);
            let rng = &mut self.listening.rng;
            let mut at = self.now + rng.range(delay.0, delay.1);
            if rng.chance(late.0) {
                at += rng.range(delay.1, late.1);
            }
            // A directed history's fixed link carries the push as it carries replies.
            if let Some(fixed) = self.procs[self.clients[client].process].fixed[node] {
                at = self.now + fixed;
            }
            let conn = self.conn_mut(client, node);
            at = at.max(conn.last);
            conn.last = at;
            if self.listening.rng.chance(self.listening.plan.gap) {
                let drop_at = self.listening.rng.range(self.now, at);
                self.push(
                    drop_at,
                    Event::ListenDrop {
                        client,
                        node,
                        session,
                    },
                );
            }
            let push = Push {
                client,
                node,
                session,
                key,
            };
            self.push(at, Event::Push(push));
        }
    }

    /// A push arrives: taken by the client's listener if its connection is still in the push's session (and the
    /// plan does not drop it now), else lost.
    pub(super) fn push_to(&mut self, push: Push) {
        let Push {
            client,
            node,
            session,
            key,
        } = push;
        let now = self.now;
        let p = self.clients[client].process;
        let cut = self.procs[p].cuts[node]
            .iter()
            .find(|&&(from, until)| from <= now && now < until)
            .map(|&(_, until)| until);
        if self.conn(client, node).session != Some(session) {
            self.struck.pushes[2] += 1;
            return;
        }
        if let Some(until) = cut {
            // The link is cut: the connection is given up, and set up again once the partition ends.
            self.struck.pushes[2] += 1;
            self.drop_listener(client, node, until.saturating_sub(now));
            return;
        }
        if self.listening.rng.chance(self.listening.plan.lost) {
            self.struck.pushes[2] += 1;
            self.drop_listener(client, node, 0);
            return;
        }
        self.struck.pushes[1] += 1;
        if let Some(ear) = &self.listening.ears[client] {
            ear.listener.take(node, &key, session);
        }
    }

    /// Client `client`'s listener connection to `node` drops if it is still in `session`.
    pub(super) fn listen_drop(&mut self, client: usize, node: usize, session: u64) {
        if self.conn(client, node).session == Some(session) {
            self.drop_listener(client, node, 0);
        }
    }

    /// A listener connection is set up, unless the node is down (it is dialled again once the node is back).
    pub(super) fn listen_up(&mut self, client: usize, node: usize) {
        let down = self.nodes[node].down;
        let conn = self.conn_mut(client, node);
        conn.dialling = false;
        if down || conn.session.is_some() {
            return;
        }
        conn.made += 1;
        conn.session = Some(conn.made);
    }

    /// `node` goes down: every listener connection to it drops (dialled again when it is back:
    /// [`World::listeners_back`]).
    pub(super) fn listeners_down(&mut self, node: usize) {
        for client in 0..self.listening.ears.len() {
            if self.listening.ears[client].is_some() && self.conn(client, node).session.is_some() {
                self.struck.listener_drops += 1;
                self.conn_mut(client, node).session = None;
            }
        }
    }

    /// `node` is back: every listener dials it again.
    pub(super) fn listeners_back(&mut self, node: usize) {
        for client in 0..self.listening.ears.len() {
            if self.listening.ears[client].is_some() {
                self.redial(client, node, 0);
            }
        }
    }

    /// A partition of process `p`'s link to `node` ended (its lock connection resets): so do its clients'
    /// listener connections to that node.
    pub(super) fn listeners_reset(&mut self, p: usize, node: usize) {
        for t in 0..self.procs[p].tasks.len() {
            let client = self.procs[p].tasks[t];
            if self.listening.ears[client].is_some() && self.conn(client, node).session.is_some() {
                self.drop_listener(client, node, 0);
            }
        }
    }

    fn drop_listener(&mut self, client: usize, node: usize, after: Time) {
        self.struck.listener_drops += 1;
        self.conn_mut(client, node).session = None;
        self.redial(client, node, after);
    }

    /// Dials `client`'s listener connection to `node` `after` from now, plus a connect's time.
    fn redial(&mut self, client: usize, node: usize, after: Time) {
        if self.conn(client, node).dialling {
            return;
        }
        self.conn_mut(client, node).dialling = true;
        // The node's latency, drawn from the listeners' stream (the world's other choices stay what they were).
        let (lo, hi) = self.nodes[node].faults.latency;
        let lat = self.listening.rng.range(lo, hi);
        self.push(self.now + after + 2 * lat, Event::ListenUp { client, node });
    }

    fn conn(&self, client: usize, node: usize) -> &Conn {
        let ear = self.listening.ears[client].as_ref();
        &ear.expect("a registered listener").conns[node]
    }

    fn conn_mut(&mut self, client: usize, node: usize) -> &mut Conn {
        let ear = self.listening.ears[client].as_mut();
        &mut ear.expect("a registered listener").conns[node]
    }
}
