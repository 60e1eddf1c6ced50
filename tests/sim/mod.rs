//! A deterministic simulator for the lock engine: N in-memory nodes ([`node`]) on a virtual clock, clients that
//! run the real engine (`muxlock::redlock::sim::Engine`) through the seam, faults chosen by a seed, and a
//! checker ([`check`]) that judges the history over virtual time.
//!
//! # One thread, one task per client
//!
//! The engine's verbs are `async` over the seam, so each simulated client is a task: its workload, a pinned
//! boxed future. [`run`] is the executor: **exactly one client runs at a time**, and its task returns `Pending`
//! only at a seam call that must wait (a round's `next()` with nothing filed for it, a clock `sleep`), after
//! recording what wakes it (virtual time reaching an instant, or an outcome filed for it). The scheduler
//! ([`World::pick`]) then advances virtual time to the next event (a delivery, a reply, a fault, a client's
//! wake-up), applies every event due, and picks the next runnable client with the seeded RNG; it polls that
//! client's task. No OS threads, no locks handed over, no waker (the world knows who waits for what). Lock values
//! come from a seeded stream, and every random choice (latency, fault, client, workload) comes from a seeded RNG:
//! one seed, one history.
//!
//! # What a round sees
//!
//! A client's rounds file their outcomes through the real `net::slots::Slots` (the fanout's own bookkeeping), so
//! a node's outcomes keep their order and a late reply after a timeout is dropped as the real fanout drops it. Each
//! client has one connection per node: requests are delivered after a latency, run by the node in order, and
//! answered after another latency, FIFO per connection (the clock check's `TIME` arrives with the command it
//! follows, and runs right after it). A connection that resets files `Closed` for every request
//! it still carried, before or after the node ran the command; the next request reconnects and runs the set-up
//! commands again (new session, new `INFO`).
//!
//! Room: in some worlds, nodes take only a few requests in flight per connection (the fanout's `max_in_flight`,
//! chosen per node by the seed): an ordinary round's request beyond it is refused at once as `Overloaded`, its outcome
//! filed under its own ids while the node's earlier requests are still on the wire. A release round's never is
//! (the real fanout holds a release for room, and sends it detached if its round ends first).
//!
//! Clocks: each client's monotonic clock drifts (within the spec's factor) and its wall clock is right (NTP); each
//! node has a wall clock of its own ([`node::NodeClock`]), by which it expires keys and answers `TIME`, right
//! unless the world has clock faults ([`Setup::clocks`]): steps forward and back, fast and stopped runs.
//!
//! Simplifications: the set-up of a new connection runs at once (even on a paused node); a release is never held
//! for room.

pub mod check;
pub mod directed;
pub mod fold;
pub mod guards;
pub mod node;
pub mod owned;
pub mod workload;

use std::cell::{Cell, RefCell, RefMut};
use std::collections::{BinaryHeap, VecDeque};
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use muxlock::net::slots::{SlotRef, Slots};
use muxlock::net::{CommandId, NodeAddr, NodeError, NodeSet, Reply};
use muxlock::redlock::sim::{Clock, NodeRound, Nodes};
use muxlock::resp::{Value, decode};

use node::{MS, Node, RIGHT_RATE, Restart, Time};

/// SplitMix64: small, fast, and the same everywhere; optionally steered by a tape of bytes (a fuzzer's input).
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
    tape: Option<Rc<Tape>>,
}

/// The bytes a fuzzer gives: each draw of every [`Rng`] sharing the tape takes the next byte, so that a byte of
/// the input decides one choice (which client runs, which verb, which fault strikes when) and a mutation moves
/// that choice alone. Everything runs on one thread in the scheduler's order, so the order in which draws take
/// bytes is itself deterministic. Once the tape is spent, the draws are the seeded stream's.
#[derive(Debug, Default)]
pub struct Tape {
    bytes: Vec<u8>,
    at: Cell<usize>,
}

impl Tape {
    pub fn new(bytes: &[u8]) -> Rc<Tape> {
        Rc::new(Tape {
            bytes: bytes.to_vec(),
            at: Cell::new(0),
        })
    }

    fn take(&self) -> Option<u8> {
        let i = self.at.get();
        self.at.set(i + 1);
        self.bytes.get(i).copied()
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng {
            state: seed ^ 0x9E37_79B9_7F4A_7C15,
            tape: None,
        }
    }
    /// A stream seeded by `seed` whose draws are steered by `tape` while it lasts.
    pub fn steered(seed: u64, tape: Option<&Rc<Tape>>) -> Rng {
        Rng {
            tape: tape.cloned(),
            ..Rng::new(seed)
        }
    }
    pub fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        match self.tape.as_ref().and_then(|t| t.take()) {
            // The byte picks one of 256 values, fixed for this draw: full-width, so `range` and `chance` work
            // as with the seed alone.
            Some(b) => mix(u64::from(b).wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ 0x1234_5678),
            None => mix(self.state),
        }
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// One node's faults, chosen by the seed.
#[derive(Clone, Debug)]
pub struct Faults {
    pub latency: (Time, Time),
    /// Probability and upper bound of a latency spike (a reply late after the round's deadline).
    pub spike: (f64, Time),
    /// Probability that a command's connection resets (half before the command runs, half after).
    pub reset: f64,
    /// Requests an ordinary round may have in flight on one connection to the node (`usize::MAX`: no limit).
    pub room: usize,
}

#[derive(Debug)]
enum Event {
    Deliver {
        client: usize,
        node: usize,
        epoch: u64,
        cmd: Rc<[Bytes]>,
        /// The request's place on its connection (a connection runs its requests in order).
        n: u64,
    },
    Reply {
        client: usize,
        node: usize,
        epoch: u64,
        reply: Value,
    },
    Pause {
        node: usize,
        span: Time,
    },
    Down {
        node: usize,
        span: Time,
        kind: Restart,
    },
    Up {
        node: usize,
        kind: Restart,
    },
    Flush {
        node: usize,
    },
    Snapshot {
        node: usize,
    },
    /// A partition of a client's link ends: the connection it broke resets.
    Mend {
        client: usize,
        node: usize,
        epoch: u64,
    },
    /// A node's wall clock is stepped or changes its rate.
    Clock {
        node: usize,
        change: ClockChange,
    },
}

/// A change to a node's wall clock (the fault plan's, `plan_clocks`).
#[derive(Clone, Copy, Debug)]
enum ClockChange {
    /// Stepped by this many nanoseconds (negative: back), as `date -s` or NTP stepping it.
    Step(i64),
    /// Runs at this many thousandths of the right rate from now on (0: stopped).
    Rate(u64),
    /// Set right again (NTP): a clock behind is stepped forward; one ahead is stepped back (see
    /// [`Setup::steps_back`]).
    Right,
}

/// When an event is due, and where it waits (`World::slab`): the heap orders these small keys, earliest first
/// and in the order pushed among equals, not the events themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Due {
    at: Time,
    seq: u64,
    slot: usize,
}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Due) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Due) -> std::cmp::Ordering {
        // Reversed: `BinaryHeap` is a max-heap.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Debug, Default)]
struct Conn {
    up: bool,
    epoch: u64,
    session: u64,
    setup: Vec<(Value, Instant)>,
    /// The round of each reply still to come, in order.
    pending: VecDeque<(SlotRef, CommandId)>,
    last_deliver: Time,
    last_reply: Time,
    /// Requests sent on this connection, and requests run (or dropped by a reset) on the node: a request runs
    /// only when every earlier one has, as on a TCP connection, however pauses held them back.
    sent: u64,
    ran: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    NotStarted,
    Running,
    Blocked,
    Done,
}

#[derive(Debug)]
struct Client {
    slots: Slots,
    conns: Vec<Conn>,
    state: State,
    /// Something was filed for this client since it began to wait.
    ready: bool,
    /// What wakes a waiting client: virtual time reaching `until`, or (unless it sleeps) something filed.
    until: Time,
    sleeping: bool,
    /// This client's clock rate (drift).
    rate: f64,
    /// A slow link of this client's own: to node `.0`, `.1` more each way (a client far away, or one that
    /// reads its replies late), in durable worlds.
    slow: Option<(usize, Time)>,
    /// Directed histories only: a fixed one-way latency to each node (replacing the drawn one), and the instant
    /// from which messages to a node are lost (a black hole: the round times out).
    fixed: Vec<Option<Time>>,
    /// Partitions of this client's link to each node, `[from, until)`: a request arriving then is lost in flight,
    /// and the connection resets when the partition ends (as TCP gives up on it).
    cuts: Vec<Vec<(Time, Time)>>,
}

#[derive(Debug)]
pub struct NodeSim {
    pub node: Node,
    /// When the node last came back without all its data (a restart from a snapshot or with nothing).
    pub lost_data_at: Option<Time>,
    down: bool,
    paused_until: Time,
    faults: Faults,
    /// When its wall clock last moved ahead of real time (a step forward; the end of a fast run, or now while
    /// it runs fast: `node.clock`'s rate): its keys may have expired early since.
    moved_ahead_at: Option<Time>,
    /// When its wall clock last fell back against real time (a step back; the end of a slow or stopped run, or
    /// now while it runs slow): its keys may have lived longer than their TTL since.
    held_back_at: Option<Time>,
}

impl NodeSim {
    /// Its wall clock moved ahead of real time at `since` or later (see [`NodeSim::moved_ahead_at`]).
    pub fn clock_moved_ahead_since(&self, since: Time) -> bool {
        self.node.clock.rate() > RIGHT_RATE || self.moved_ahead_at.is_some_and(|t| t >= since)
    }

    /// Its wall clock fell back against real time at `since` or later (see [`NodeSim::held_back_at`]).
    pub fn clock_held_back_since(&self, since: Time) -> bool {
        self.node.clock.rate() < RIGHT_RATE || self.held_back_at.is_some_and(|t| t >= since)
    }

    /// Steps its clock by `step` and sets its rate to `rate` at `now`, keeping the marks above.
    fn change_clock(&mut self, now: Time, step: i64, rate: u64) {
        let clock = self.node.clock;
        if clock.rate() > RIGHT_RATE || step > 0 {
            self.moved_ahead_at = Some(now);
        }
        if clock.rate() < RIGHT_RATE || step < 0 {
            self.held_back_at = Some(now);
        }
        self.node.expire_all(now);
        self.node.clock.change(now, step, rate);
    }
}

/// What struck the rounds, to show the faults mattered.
#[derive(Clone, Debug, Default)]
pub struct Struck {
    pub timeouts: u64,
    pub resets_before: u64,
    pub resets_after: u64,
    pub refused: u64,
    /// Requests of ordinary rounds refused for room (`Overloaded`).
    pub overloaded: u64,
    pub restarts: u64,
    pub pauses: u64,
    pub noscript: u64,
    pub late: u64,
    /// Requests lost in flight to a partition.
    pub lost: u64,
    /// When a node first came back without its data (fence counters too): the documented limit of fencing
    /// (counters must survive a restart), so tokens are checked only among grants made before it.
    pub counters_lost_at: Option<Time>,
    /// Times a guard told its holder it was not lost and the nodes were checked, and guards their holder saw
    /// lost before it meant to release them.
    pub guard_checks: u64,
    pub guards_lost: u64,
    /// Renewals of guards confirmed by a majority.
    pub guard_renewals: u64,
    /// Times a reentrant owner's outer hold was checked on the nodes while it reported valid.
    pub reentrant_checks: u64,
    /// Owned holders' sessions (an outer owned hold, bare or guarded, with nested holds, extensions
    /// and releases in any order), times one of their holds was relied on and checked on the nodes, confirmed
    /// extensions of bare owned holds, holds let go as lost or expired, and outer holds released while nested
    /// ones lived on.
    pub owned_sessions: u64,
    pub owned_checks: u64,
    pub owned_extensions: u64,
    pub owned_lost: u64,
    pub outer_released_first: u64,
    /// Native compare-and-delete / `SET IFEQ` commands the nodes ran (the native worlds).
    pub native_calls: u64,
    /// Fenced grants whose tokens the checker compared: a count that shows the check ran (a check turned off for
    /// the whole history by any counter loss would skip nearly every seed).
    pub tokens_checked: u64,
    /// Folded release rounds (`sim/fold.rs`), the releases that went out in them, and releases of
    /// locks whose keys had expired on every node (their verdict must not be `Ok`).
    pub folded_rounds: u64,
    pub folded: u64,
    pub expired_released: u64,
    /// Folded releases whose futures were dropped part-way (`Options::cut_folds`).
    pub cut_releases: u64,
    /// Steps and rate changes of nodes' wall clocks (the clock-fault worlds), and steps back made stops (slews)
    /// instead (worlds without [`Setup::steps_back`]).
    pub clock_changes: u64,
    pub clock_slews: u64,
    /// `TIME` replies, one per request of each round that sets or extends a lease, from a node whose clock was
    /// more than the clock tolerance ahead of real time, or behind it (votes the clock check must refuse); how
    /// many of those came while a majority of the nodes were that far off; and replies from a node whose clock
    /// was off by less than the tolerance (votes that count, which the leases' `2T` margin must cover).
    pub time_ahead: u64,
    pub time_behind: u64,
    pub time_off_majority: u64,
    pub time_within: u64,
}

/// Everything the simulation shares: nodes, clients' connections and rounds, events, time, the history.
#[derive(Debug)]
pub struct World {
    pub now: Time,
    pub rng: Rng,
    pub nodes: Vec<NodeSim>,
    events: BinaryHeap<Due>,
    /// The events waiting, and the free places among them.
    slab: Vec<Option<Event>>,
    free: Vec<usize>,
    seq: u64,
    clients: Vec<Client>,
    setup: Vec<Rc<[Bytes]>>,
    base: Instant,
    runs: u64,
    /// The clients' clock tolerance (the clock check's `T`), for the counts.
    tolerance: Time,
    /// Clocks step back as planned (see [`Setup::steps_back`]).
    steps_back: bool,
    pub struck: Struck,
    pub history: check::History,
}

/// Decodes a request into its commands (arrays of bulk strings).
fn commands(request: &[u8]) -> Vec<Rc<[Bytes]>> {
    let mut buf = BytesMut::from(request);
    let mut out = Vec::new();
    while let Ok(Some(Value::Array(items))) = decode(&mut buf) {
        out.push(
            items
                .into_iter()
                .map(|v| match v {
                    Value::BulkString(b) => b,
                    _ => Bytes::new(),
                })
                .collect(),
        );
    }
    out
}

impl World {
    fn push(&mut self, at: Time, event: Event) {
        self.seq += 1;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slab[slot] = Some(event);
                slot
            }
            None => {
                self.slab.push(Some(event));
                self.slab.len() - 1
            }
        };
        self.events.push(Due {
            at,
            seq: self.seq,
            slot,
        });
    }

    /// A client's instant for virtual time `t`.
    pub fn instant(&self, client: usize, t: Time) -> Instant {
        let rate = self.clients[client].rate;
        self.base + Duration::from_nanos((t as f64 * rate) as u64)
    }

    /// The virtual time of a client's instant.
    pub fn time(&self, client: usize, at: Instant) -> Time {
        let rate = self.clients[client].rate;
        (at.saturating_duration_since(self.base).as_nanos() as f64 / rate) as Time
    }

    /// Directed histories: every message between `client` and `node` takes exactly `latency`, and the node's own
    /// faults (spikes, resets) are off.
    pub fn fix_link(&mut self, client: usize, node: usize, latency: Time) {
        self.clients[client].fixed[node] = Some(latency);
        self.clients[client].slow = None;
        let faults = &mut self.nodes[node].faults;
        (faults.spike, faults.reset) = ((0.0, 0), 0.0);
    }

    /// Directed histories: at `at`, `node`'s wall clock is stepped by `step_ms` (negative: back), or with `None`
    /// set right again ([`ClockChange::Right`]); a step back is a stop (a slew) unless the world has
    /// [`Setup::steps_back`].
    pub fn move_clock(&mut self, node: usize, at: Time, step_ms: Option<i64>) {
        let change = match step_ms {
            Some(ms) => ClockChange::Step(ms * MS as i64),
            None => ClockChange::Right,
        };
        self.push(at, Event::Clock { node, change });
    }

    /// From `from` until `until`, what `client` sends to `node` is lost in flight (a partition of that link).
    pub fn cut(&mut self, client: usize, node: usize, from: Time, until: Time) {
        self.clients[client].cuts[node].push((from, until));
    }

    fn latency(&mut self, client: usize, node: usize) -> Time {
        if let Some(fixed) = self.clients[client].fixed[node] {
            return fixed;
        }
        let extra = match self.clients[client].slow {
            // Anywhere up to the link's bound, message by message: a request may be quick and its successor
            // late (a reply read late by a descheduled client looks the same).
            Some((slow, extra)) if slow == node => self.rng.range(0, extra),
            _ => 0,
        };
        extra + self.node_latency(node)
    }

    fn node_latency(&mut self, node: usize) -> Time {
        let f = self.nodes[node].faults.clone();
        if self.rng.chance(f.spike.0) {
            return self.rng.range(f.latency.1, f.spike.1);
        }
        self.rng.range(f.latency.0, f.latency.1)
    }

    fn reset(&mut self, client: usize, node: usize) {
        let c = &mut self.clients[client];
        let conn = &mut c.conns[node];
        conn.up = false;
        conn.epoch += 1;
        conn.setup.clear();
        (conn.sent, conn.ran) = (0, 0);
        for (r, id) in std::mem::take(&mut conn.pending) {
            let filed = c.slots.file(r, id, Err(NodeError::Closed));
            assert!(
                filed.is_ok(),
                "a connection's replies in the order of their ids"
            );
        }
        c.ready = true;
    }

    /// Queues `cmds` from `client` to `node` for round `r` (`release`: a release round's); false if the node
    /// refused the connection, or had no room for an ordinary round's request.
    fn send(
        &mut self,
        (client, node): (usize, usize),
        (r, release): (SlotRef, bool),
        cmds: &[Rc<[Bytes]>],
    ) -> bool {
        let k = cmds.len();
        let in_flight = self.clients[client].conns[node].pending.len();
        if !release && in_flight.saturating_add(k) > self.nodes[node].faults.room {
            self.struck.overloaded += 1;
            let c = &mut self.clients[client];
            let first = c.slots.expect(r, node, k);
            c.slots
                .refuse(r, node, first, k, Err(NodeError::Overloaded));
            c.ready = true;
            return false;
        }
        if self.nodes[node].down {
            self.struck.refused += 1;
            let c = &mut self.clients[client];
            let first = c.slots.expect(r, node, k);
            c.slots.refuse(r, node, first, k, Err(NodeError::Refused));
            c.ready = true;
            return false;
        }
        if !self.clients[client].conns[node].up {
            let now = self.now;
            let at = self.instant(client, now);
            let setup = self.setup.clone();
            let replies: Vec<(Value, Instant)> = setup
                .iter()
                .map(|cmd| (self.nodes[node].node.exec(cmd, now), at))
                .collect();
            let conn = &mut self.clients[client].conns[node];
            conn.up = true;
            conn.session += 1;
            conn.setup = replies;
        }
        let first = self.clients[client].slots.expect(r, node, k);
        self.clients[client].slots.queued(r, node, first, k);
        for (i, cmd) in (0u32..).zip(cmds) {
            // The clock check's `TIME` goes in the same write as the command before it, so arrives with it (and
            // runs right after it: nothing comes between two events due at one instant, pushed one after the
            // other). Apart, a clock step could fall between them, which the check cannot see (`clock.rs`).
            let lat = match &cmd[..] {
                [time] if &time[..] == b"TIME" => 0,
                _ => self.latency(client, node),
            };
            let conn = &mut self.clients[client].conns[node];
            let seq = first.wrapping_add(i);
            conn.pending.push_back((r, CommandId { node, seq }));
            let at = (self.now + lat).max(conn.last_deliver);
            conn.last_deliver = at;
            let epoch = conn.epoch;
            let n = conn.sent;
            conn.sent += 1;
            self.push(
                at,
                Event::Deliver {
                    client,
                    node,
                    epoch,
                    cmd: Rc::clone(cmd),
                    n,
                },
            );
        }
        true
    }

    fn apply(&mut self, event: Event) {
        let now = self.now;
        match event {
            Event::Deliver {
                client,
                node,
                epoch,
                cmd,
                n,
            } => {
                let conn = &self.clients[client].conns[node];
                if conn.epoch != epoch || self.nodes[node].down {
                    return;
                }
                let cut = self.clients[client].cuts[node]
                    .iter()
                    .find(|&&(from, until)| from <= now && now < until)
                    .copied();
                if let Some((_, until)) = cut {
                    // Lost in flight: it never runs and no reply comes (the round times the node out); the
                    // connection resets when the partition ends, unless something reset it before.
                    self.struck.lost += 1;
                    if until < Time::MAX {
                        self.push(
                            until,
                            Event::Mend {
                                client,
                                node,
                                epoch,
                            },
                        );
                    }
                    return;
                }
                // A paused node runs nothing, and a request never overtakes an earlier one of its connection
                // (one a pause held back): it waits until the pause ends, or behind the earlier one (requeued
                // at the same instant, it comes after it).
                let paused_until = self.nodes[node].paused_until;
                if paused_until > now || n != conn.ran {
                    self.push(
                        paused_until.max(now),
                        Event::Deliver {
                            client,
                            node,
                            epoch,
                            cmd,
                            n,
                        },
                    );
                    return;
                }
                self.clients[client].conns[node].ran += 1;
                let reset = self.nodes[node].faults.reset;
                if self.rng.chance(reset / 2.0) {
                    self.struck.resets_before += 1;
                    self.reset(client, node);
                    return;
                }
                let reply = self.nodes[node].node.exec(&cmd, now);
                if matches!(&reply, Value::Error(m) if m.starts_with(b"NOSCRIPT")) {
                    self.struck.noscript += 1;
                }
                if cmd.first().is_some_and(|c| &c[..] == b"TIME") {
                    self.count_time(node);
                }
                if self.rng.chance(reset / 2.0) {
                    self.struck.resets_after += 1;
                    self.reset(client, node);
                    return;
                }
                let lat = self.latency(client, node);
                let conn = &mut self.clients[client].conns[node];
                let at = (now + lat).max(conn.last_reply);
                conn.last_reply = at;
                self.push(
                    at,
                    Event::Reply {
                        client,
                        node,
                        epoch,
                        reply,
                    },
                );
            }
            Event::Reply {
                client,
                node,
                epoch,
                reply,
            } => {
                let c = &mut self.clients[client];
                if c.conns[node].epoch != epoch {
                    return;
                }
                if let Some((r, id)) = c.conns[node].pending.pop_front() {
                    // A late reply (its round timed the node out, or was dropped) is dropped by the slots, and
                    // wakes nobody.
                    let late = c.slots.settled(r);
                    let filed = c.slots.file(r, id, Ok(reply));
                    assert!(
                        filed.is_ok(),
                        "a connection's replies in the order of their ids"
                    );
                    c.ready |= !late;
                    self.struck.late += u64::from(late);
                }
            }
            Event::Pause { node, span } => {
                self.struck.pauses += 1;
                let n = &mut self.nodes[node];
                n.paused_until = n.paused_until.max(now + span);
            }
            Event::Down { node, span, kind } => {
                if self.nodes[node].down {
                    return;
                }
                self.struck.restarts += 1;
                self.nodes[node].down = true;
                for c in 0..self.clients.len() {
                    if self.clients[c].conns[node].up {
                        self.reset(c, node);
                    }
                }
                self.push(now + span, Event::Up { node, kind });
            }
            Event::Up { node, kind } => {
                self.runs += 1;
                let run = self.rng.next() ^ self.runs;
                if kind != Restart::KeepAll && self.struck.counters_lost_at.is_none() {
                    self.struck.counters_lost_at = Some(now);
                }
                let n = &mut self.nodes[node];
                if kind != Restart::KeepAll {
                    n.lost_data_at = Some(now);
                }
                n.node.restart(now, kind, run);
                n.down = false;
                n.paused_until = 0;
                let line = format!("{} node {node} is back ({kind:?})", check::ms(now));
                self.history.note(line);
            }
            Event::Flush { node } => self.nodes[node].node.flush_scripts(),
            Event::Snapshot { node } => self.nodes[node].node.take_snapshot(),
            Event::Mend {
                client,
                node,
                epoch,
            } => {
                if self.clients[client].conns[node].epoch == epoch {
                    self.reset(client, node);
                }
            }
            Event::Clock { node, change } => self.change_clock(node, change),
        }
    }

    /// Applies a change to a node's clock now.
    fn change_clock(&mut self, node: usize, change: ClockChange) {
        let now = self.now;
        let clock = self.nodes[node].node.clock;
        let (mut step, mut rate) = match change {
            ClockChange::Step(step) => (step, clock.rate()),
            ClockChange::Rate(rate) => (0, rate),
            ClockChange::Right => (-clock.offset(now), RIGHT_RATE),
        };
        if step < 0 && !self.steps_back {
            // Slewed instead: stopped until it has lost the step, then at the rate it was to have.
            self.struck.clock_slews += 1;
            let back = step.unsigned_abs();
            self.push(
                now + back,
                Event::Clock {
                    node,
                    change: ClockChange::Rate(rate),
                },
            );
            (step, rate) = (0, 0);
        }
        self.struck.clock_changes += 1;
        self.nodes[node].change_clock(now, step, rate);
        let after = self.nodes[node].node.clock.offset(now);
        self.history.note(format!(
            "{} node {node}'s clock {change:?}: {:+.1} ms ahead, rate {}‰",
            check::ms(now),
            after as f64 / MS as f64,
            rate
        ));
    }

    /// Counts a `TIME` reply of `node` now by how far off its clock is (see [`Struck::time_ahead`]).
    fn count_time(&mut self, node: usize) {
        let (now, tolerance) = (self.now, self.tolerance as i64);
        let off = |n: &NodeSim| n.node.clock.offset(now);
        let far = self
            .nodes
            .iter()
            .filter(|n| off(n).abs() > tolerance)
            .count();
        let offset = off(&self.nodes[node]);
        let s = &mut self.struck;
        match offset {
            o if o > tolerance => s.time_ahead += 1,
            o if o < -tolerance => s.time_behind += 1,
            0 => return,
            _ => s.time_within += 1,
        }
        if offset.abs() > tolerance && far > self.nodes.len() / 2 {
            s.time_off_majority += 1;
        }
    }

    /// How many nodes hold `value` on `key` now, and how many are excused for not holding it: they came back
    /// without their data (a snapshot, or nothing) at `since` or later, a fault a guard learns of only at its
    /// next renewal (the restart guard, not the keys, keeps the lock safe meanwhile), or their clocks moved ahead
    /// of real time since (keys expire early there; the clock check, not the keys, keeps the lock safe).
    pub fn holding(&mut self, key: &[u8], value: &[u8], since: Time) -> (usize, usize) {
        let now = self.now;
        let (mut holding, mut excused) = (0, 0);
        for n in &mut self.nodes {
            if n.node.holds(key, value, now) {
                holding += 1;
            } else if n.lost_data_at.is_some_and(|t| t >= since) || n.clock_moved_ahead_since(since)
            {
                excused += 1;
            }
        }
        (holding, excused)
    }

    /// Client `me` waits (its task returns `Pending`) until virtual time reaches `until` or, if `outcome`,
    /// until something is filed for it.
    fn wait(&mut self, me: usize, until: Time, outcome: bool) {
        let c = &mut self.clients[me];
        c.state = State::Blocked;
        c.until = until;
        c.sleeping = !outcome;
        c.ready = false;
    }

    fn runnable(&self, i: usize) -> bool {
        let c = &self.clients[i];
        match c.state {
            State::NotStarted => true,
            State::Blocked => c.ready && !c.sleeping || c.until <= self.now,
            State::Running | State::Done => false,
        }
    }

    /// The next client to run: advances time and applies events until one is runnable, then picks one of the
    /// runnable clients with the seeded RNG. `None`: all are done (or nothing can ever wake the rest).
    fn pick(&mut self) -> Option<usize> {
        loop {
            let n = (0..self.clients.len())
                .filter(|&i| self.runnable(i))
                .count();
            if n > 0 {
                let k = (self.rng.next() % n as u64) as usize;
                let i = (0..self.clients.len())
                    .filter(|&i| self.runnable(i))
                    .nth(k)
                    .expect("k < n");
                let c = &mut self.clients[i];
                c.state = State::Running;
                c.ready = false;
                return Some(i);
            }
            let wake = self
                .clients
                .iter()
                .filter(|c| c.state == State::Blocked)
                .map(|c| c.until)
                .min();
            let event = self.events.peek().map(|d| d.at);
            let next = match (wake, event) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => return None,
            };
            self.now = self.now.max(next);
            while self.events.peek().is_some_and(|d| d.at <= self.now) {
                let due = self.events.pop().expect("peeked");
                let event = self.slab[due.slot].take().expect("an event per key");
                self.free.push(due.slot);
                self.apply(event);
            }
            // Once no client waits on anything, events left (replies nobody reads) may be dropped.
            if self.clients.iter().all(|c| c.state == State::Done) {
                return None;
            }
        }
    }
}

/// The shared simulation: the world, borrowed by whoever runs (the scheduler between polls, the client being
/// polled inside its seam calls). One thread, so a `RefCell`: a borrow held across an `.await` would be a bug,
/// and panics at once instead of deadlocking.
#[derive(Debug)]
pub struct Sim {
    world: RefCell<World>,
    clients: usize,
}

impl Sim {
    pub fn world(&self) -> RefMut<'_, World> {
        self.world.borrow_mut()
    }
}

/// A world's configuration, drawn from the seed.
#[derive(Clone, Debug)]
pub struct Setup {
    pub nodes: usize,
    pub clients: usize,
    pub horizon: Time,
    /// Restore bursts: every node keeps snapshots (no AOF), and now and then all take a snapshot and, soon
    /// after, a majority restarts from it (keys written since are lost, keys deleted since come back).
    pub bursts: bool,
    /// Fencing histories: every node keeps an AOF with `appendfsync always` and restarts keep all its data
    /// (fencing's documented assumption: counters survive restarts), so the token order is checked.
    pub durable: bool,
    /// The fuzzer's bytes, if it drives the run.
    pub tape: Option<Rc<Tape>>,
    /// Nodes of three servers in turn: node `i` has no native compare-and-delete (Redis 7.0), `DELIFEQ`
    /// (Valkey ≥ 9) or `DELEX` (Redis ≥ 8.4) as `i % 3` says, so one manager meets all three. Off: all Redis 7.0.
    pub natives: bool,
    /// Clock faults (`plan_clocks`): every 0.2–2 s, a minority or a majority of the nodes have their wall clocks
    /// stepped forward past any lease or by about the clock tolerance, stepped back (a stop until the step is lost,
    /// unless `steps_back`), run twice as fast or stopped for a while (and, half the time, set right again 0.1–1.5 s
    /// later), or set right again.
    pub clocks: bool,
    /// With `clocks`: clocks step back as planned (`date -s`, NTP stepping a clock that is ahead). Off, a step back
    /// is a stop until the clock has lost the step (a slew, as NTP corrects small offsets, and chrony all but the
    /// first): the nodes' clocks never go back. The clock check's argument (`src/redlock/engine/clock.rs`) holds
    /// for clocks that never go back; with clocks that do, a lock can be handed out twice with the check on: a key
    /// that expired early while its clock ran ahead stays expired when the clock comes back, and an extension that
    /// ran on a clock set back (refused or not) makes the key expire earlier than its grant did, which a later
    /// step forward brings on. Neither shows on the side that acquires.
    pub steps_back: bool,
}

/// Builds a world for `seed`: nodes with their faults and a plan of pauses, restarts, flushes and snapshots.
pub fn world(seed: u64, setup: &Setup, connection_setup: &[Bytes]) -> Rc<Sim> {
    let mut rng = Rng::steered(seed, setup.tape.as_ref());
    // Room from a stream of its own, so that the other choices of a seed stay what they were: in one world of
    // four, each node takes 2, 4 or 8 requests in flight per connection.
    let mut room = Rng::new(seed ^ 0x726f_6f6d);
    let tight = room.chance(0.25);
    let mut nodes = Vec::new();
    for i in 0..setup.nodes {
        let lo = rng.range(50_000, 500_000);
        let faults = Faults {
            latency: (lo, lo + rng.range(0, 2 * MS)),
            spike: (
                [0.0, 0.01, 0.05][rng.range(0, 2) as usize],
                rng.range(20, 300) * MS,
            ),
            reset: [0.0, 0.01, 0.05][rng.range(0, 2) as usize],
            room: match tight {
                true => [2, 4, 8][room.range(0, 2) as usize],
                false => usize::MAX,
            },
        };
        let mut node = Node::new(
            setup.durable || !setup.bursts && rng.chance(0.5),
            rng.next() ^ i as u64,
        );
        if setup.natives {
            node.native = [
                node::Native::None,
                node::Native::DelIfEq,
                node::Native::DelEx,
            ][i % 3];
        }
        nodes.push(NodeSim {
            node,
            lost_data_at: None,
            down: false,
            paused_until: 0,
            faults,
            moved_ahead_at: None,
            held_back_at: None,
        });
    }
    let clients = (0..setup.clients)
        .map(|_| Client {
            slots: Slots::default(),
            conns: (0..setup.nodes).map(|_| Conn::default()).collect(),
            state: State::NotStarted,
            ready: false,
            until: 0,
            sleeping: false,
            // Within ±0.4 %: two clients differ by less than the 1 % drift factor.
            rate: 1.0 + (rng.range(0, 800) as f64 - 400.0) / 100_000.0,
            slow: None,
            fixed: vec![None; setup.nodes],
            cuts: vec![Vec::new(); setup.nodes],
        })
        .collect();
    let mut w = World {
        now: 0,
        rng: Rng::steered(seed.wrapping_mul(31).wrapping_add(7), setup.tape.as_ref()),
        nodes,
        events: BinaryHeap::new(),
        slab: Vec::new(),
        free: Vec::new(),
        seq: 0,
        clients,
        setup: connection_setup
            .iter()
            .map(|c| commands(c).into_iter().next().unwrap_or_default())
            .collect(),
        base: Instant::now(),
        runs: 0,
        tolerance: muxlock::Config::default().clock_tolerance().as_nanos() as Time,
        steps_back: setup.steps_back,
        struck: Struck::default(),
        history: check::History::default(),
    };
    // The fault plan.
    for node in 0..setup.nodes {
        let mut t = 0;
        loop {
            t += rng.range(100, 3000) * MS;
            if t >= setup.horizon {
                break;
            }
            match rng.range(0, 9) {
                0..=2 => w.push(
                    t,
                    Event::Pause {
                        node,
                        span: rng.range(5, 400) * MS,
                    },
                ),
                3..=5 => {
                    let kind = match (w.nodes[node].node.aof_always, rng.range(0, 3)) {
                        (true, 0) if !setup.durable => Restart::LoseAll,
                        (true, _) => Restart::KeepAll,
                        (false, 0 | 1) => Restart::Snapshot,
                        (false, _) => Restart::LoseAll,
                    };
                    w.push(
                        t,
                        Event::Down {
                            node,
                            span: rng.range(0, 300) * MS,
                            kind,
                        },
                    )
                }
                6 => w.push(t, Event::Flush { node }),
                _ => w.push(t, Event::Snapshot { node }),
            }
        }
    }
    if setup.durable {
        // Counters that differ between nodes (as lost confirmations leave them), and a slow link for each client:
        // the slow client's history (`slow_fence_history`) needs both.
        for n in &mut w.nodes {
            for r in ["r0", "r1", "r2"] {
                let c = rng.range(0, 12);
                n.node.set_counter(r.as_bytes(), c);
            }
        }
        for c in 0..w.clients.len() {
            let node = rng.range(0, setup.nodes as u64 - 1) as usize;
            w.clients[c].slow = Some((node, rng.range(100, 1_500) * MS));
            // Partitions of the client's links, now and then: what is in flight is lost (a write-back too).
            let mut t = 0;
            loop {
                t += rng.range(300, 3_000) * MS;
                if t >= setup.horizon {
                    break;
                }
                let node = rng.range(0, setup.nodes as u64 - 1) as usize;
                let until = t + rng.range(20, 1_500) * MS;
                w.clients[c].cuts[node].push((t, until));
            }
        }
    }
    if setup.bursts {
        let majority = setup.nodes / 2 + 1;
        let mut t = 0;
        loop {
            t += rng.range(300, 1500) * MS;
            if t >= setup.horizon {
                break;
            }
            for node in 0..setup.nodes {
                w.push(t, Event::Snapshot { node });
            }
            let back = t + rng.range(50, 1200) * MS;
            let first = rng.range(0, setup.nodes as u64 - 1) as usize;
            for k in 0..majority {
                let node = (first + k) % setup.nodes;
                let span = rng.range(0, 30) * MS;
                let kind = Restart::Snapshot;
                w.push(back, Event::Down { node, span, kind });
            }
        }
    }
    if setup.clocks {
        plan_clocks(&mut w, seed, setup);
    }
    Rc::new(Sim {
        clients: setup.clients,
        world: RefCell::new(w),
    })
}

/// The clock faults of a world (see [`Setup::clocks`]), from a stream of their own: the seed's other choices stay
/// what they were.
fn plan_clocks(w: &mut World, seed: u64, setup: &Setup) {
    let mut rng = Rng::new(seed ^ 0x636c_6f63_6b73);
    let n = setup.nodes;
    let ms = |m: u64| (m * MS) as i64;
    let mut t = 0;
    loop {
        t += rng.range(200, 2_000) * MS;
        if t >= setup.horizon {
            break;
        }
        let k = match rng.chance(0.5) {
            true => n / 2 + 1,
            false => rng.range(1, (n as u64 - 1) / 2) as usize,
        };
        let first = rng.range(0, n as u64 - 1) as usize;
        let kind = rng.range(0, 5);
        let (change, lasts) = match kind {
            // Past any lease (the workload's are 4 s at most).
            0 => (ClockChange::Step(ms(rng.range(4_100, 6_000))), None),
            // About the tolerance (25 ms by default): some counted, some refused.
            1 => (ClockChange::Step(ms(rng.range(5, 60))), None),
            2 => {
                let back = match rng.chance(0.5) {
                    true => rng.range(5, 60),
                    false => rng.range(200, 3_000),
                };
                (ClockChange::Step(-ms(back)), None)
            }
            3 => (
                ClockChange::Rate(2 * RIGHT_RATE),
                Some(rng.range(200, 2_000) * MS),
            ),
            4 => (ClockChange::Rate(0), Some(rng.range(50, 1_500) * MS)),
            _ => (ClockChange::Right, None),
        };
        // Half the time, a clock moved is set right soon after its fault (NTP noticing).
        let right = (kind < 5 && rng.chance(0.5))
            .then(|| t + lasts.unwrap_or(0) + rng.range(100, 1_500) * MS);
        for j in 0..k {
            let node = (first + j) % n;
            w.push(t, Event::Clock { node, change });
            if let Some(span) = lasts {
                let change = ClockChange::Rate(RIGHT_RATE);
                w.push(t + span, Event::Clock { node, change });
            }
            if let Some(at) = right {
                let change = ClockChange::Right;
                w.push(at, Event::Clock { node, change });
            }
        }
    }
}

/// A client's task: its workload as a future, polled by [`run`] whenever the client is picked.
type Task = Pin<Box<dyn Future<Output = ()>>>;

/// Runs one task per client (`body` makes each from its nodes and clock) to the end, on this thread: the
/// scheduler ([`World::pick`]) advances virtual time, applies the events due and picks the next runnable client
/// with the seeded RNG; that client's task is polled until it waits again (a round's `next()` with nothing
/// filed, a clock `sleep`), which records what wakes it, and returns `Pending`. Nothing is woken through the
/// [`Waker`]: the world knows who waits for what.
pub fn run<F, T>(sim: &Rc<Sim>, body: F)
where
    F: Fn(SimNodes, SimClock) -> T,
    T: Future<Output = ()> + 'static,
{
    let n_nodes = sim.world().nodes.len();
    let addrs: Rc<[NodeAddr]> = (0..n_nodes)
        .map(|i| format!("sim-node-{i}:6379").parse().expect("address"))
        .collect();
    let mut tasks: Vec<Option<Task>> = (0..sim.clients)
        .map(|me| {
            let nodes = SimNodes {
                sim: Rc::clone(sim),
                me,
                addrs: Rc::clone(&addrs),
            };
            let clock = SimClock {
                sim: Rc::clone(sim),
                me,
            };
            Some(Box::pin(body(nodes, clock)) as Task)
        })
        .collect();
    let mut cx = Context::from_waker(Waker::noop());
    // A workload that waits without letting virtual time pass would spin here for ever: fail instead.
    let (mut at, mut polls) = (0, 0u32);
    loop {
        let Some(me) = sim.world().pick() else { break };
        let now = sim.world().now;
        (at, polls) = match now == at {
            true => (at, polls + 1),
            false => (now, 0),
        };
        assert!(
            polls < 100_000,
            "client {me} is polled for ever at {now} ns"
        );
        let Some(task) = tasks[me].as_mut() else {
            unreachable!("client {me} is done and picked");
        };
        let polled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task.as_mut().poll(&mut cx)));
        let done = match polled {
            Ok(Poll::Ready(())) => true,
            Ok(Poll::Pending) => {
                let state = sim.world().clients[me].state;
                assert_eq!(state, State::Blocked, "client {me} pending without a wait");
                false
            }
            Err(_) => {
                sim.world().history.note(format!("client {me} panicked"));
                true
            }
        };
        if done {
            // Dropped before the world is borrowed: its rounds close their slots on drop.
            tasks[me] = None;
            sim.world().clients[me].state = State::Done;
        }
    }
    // Nothing can wake the rest (never so while every wait has a deadline): their rounds are abandoned.
    drop(tasks);
}

/// One client's view of the nodes (the seam's `Nodes`).
#[derive(Debug)]
pub struct SimNodes {
    sim: Rc<Sim>,
    me: usize,
    addrs: Rc<[NodeAddr]>,
}

/// One client's clock (the seam's `Clock`): virtual time at the client's rate.
#[derive(Debug)]
pub struct SimClock {
    sim: Rc<Sim>,
    me: usize,
}

impl SimClock {
    pub fn sim(&self) -> &Rc<Sim> {
        &self.sim
    }
    pub fn me(&self) -> usize {
        self.me
    }
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        let w = self.sim.world();
        w.instant(self.me, w.now)
    }

    /// The client's wall clock: right, as NTP keeps it (its monotonic clock is the one that drifts).
    fn wall(&self) -> Duration {
        let w = self.sim.world();
        Duration::from_nanos(node::true_wall(w.now))
    }

    /// Pending until `pause` (of this client's clock) has passed in virtual time; always gives way once, even
    /// for a zero pause (another client may run first), as the real thread's sleep may be descheduled.
    fn sleep(&self, pause: Duration) -> impl Future<Output = ()> {
        let until = {
            let w = self.sim.world();
            let rate = w.clients[self.me].rate;
            // Rounded up, and a nanosecond more: this client's clock reads at least `pause` later when it
            // wakes (`instant` rounds down).
            w.now + (pause.as_nanos() as f64 / rate).ceil() as Time + 1
        };
        let mut waited = false;
        poll_fn(move |_| {
            let mut w = self.sim.world();
            if waited && w.now >= until {
                return Poll::Ready(());
            }
            waited = true;
            w.wait(self.me, until, false);
            Poll::Pending
        })
    }
}

/// A round of one client.
#[derive(Debug)]
pub struct SimRound<'a> {
    nodes: &'a SimNodes,
    slot: SlotRef,
    /// A release round's: never refused for room.
    release: bool,
    deadline: Instant,
    /// Nodes timed out so far, and until when the caller last gave way after one.
    timeouts: u32,
    gave_way: Option<Time>,
}

/// How long a caller takes between two outcomes after the deadline: the real fanout's other threads may read
/// replies meanwhile (a late reply that must not be counted for another request of the round needs that gap to
/// be filed between two timeouts).
const STEP: Time = 20_000;

impl SimNodes {
    /// A round of this client's (`release`: a release round's).
    fn open(&self, deadline: Instant, release: bool) -> SimRound<'_> {
        let mut w = self.sim.world();
        let n = self.addrs.len();
        let slot = w.clients[self.me].slots.open(n, deadline);
        SimRound {
            nodes: self,
            slot,
            release,
            deadline,
            timeouts: 0,
            gave_way: None,
        }
    }
}

impl Nodes for SimNodes {
    type Round<'a> = SimRound<'a>;

    fn len(&self) -> usize {
        self.addrs.len()
    }

    fn addrs(&self) -> &[NodeAddr] {
        &self.addrs
    }

    fn round(&self, deadline: Instant) -> SimRound<'_> {
        self.open(deadline, false)
    }

    fn release_round(&self, deadline: Instant) -> SimRound<'_> {
        self.open(deadline, true)
    }

    fn sessions(&self, node: usize) -> u64 {
        self.sim.world().clients[self.me].conns[node].session
    }

    fn setup_replies(&self, node: usize) -> Vec<(Value, Instant)> {
        self.sim.world().clients[self.me].conns[node].setup.clone()
    }
}

impl NodeRound for SimRound<'_> {
    fn send_to(&mut self, nodes: NodeSet, request: &[u8], _replies: usize) -> NodeSet {
        let cmds = commands(request);
        let mut w = self.nodes.sim.world();
        let mut sent = NodeSet::EMPTY;
        for node in 0..self.nodes.addrs.len() {
            let to = (self.nodes.me, node);
            if nodes.contains(node) && w.send(to, (self.slot, self.release), &cmds) {
                sent.insert(node);
            }
        }
        sent
    }

    fn send(&mut self, node: usize, request: &[u8], replies: usize) -> NodeSet {
        let mut only = NodeSet::EMPTY;
        only.insert(node);
        self.send_to(only, request, replies)
    }

    fn need(&mut self, _outcomes: usize) {}

    fn next_seq(&self, node: usize) -> u32 {
        self.nodes.sim.world().clients[self.nodes.me]
            .slots
            .next_seq(self.slot, node)
    }

    /// The real fanout waits past the deadline only for nodes still answering; here half the patient rounds
    /// (seeded) wait for every node up to `hard`: the contract's widest case, an outcome at any instant until
    /// then, so the engine is checked against votes as late as a patient round can count them.
    fn patient_until(&mut self, hard: Instant) {
        let mut w = self.nodes.sim.world();
        if hard > self.deadline && w.rng.chance(0.5) {
            self.deadline = hard;
            w.clients[self.nodes.me].slots.extend(self.slot, hard);
        }
    }

    fn next(&mut self) -> impl Future<Output = Option<(CommandId, Reply)>> {
        poll_fn(move |_| self.poll_next())
    }
}

impl SimRound<'_> {
    /// The next outcome if one is filed (or `None` once the round is settled); else `Pending`, this client
    /// waiting until something is filed for it or until the deadline (or the pause after a timeout).
    fn poll_next(&mut self) -> Poll<Option<(CommandId, Reply)>> {
        let me = self.nodes.me;
        let mut w = self.nodes.sim.world();
        loop {
            if let Some(outcome) = w.clients[me].slots.take(self.slot) {
                return Poll::Ready(Some(outcome));
            }
            if w.clients[me].slots.settled(self.slot) {
                return Poll::Ready(None);
            }
            let deadline = w.time(me, self.deadline);
            if w.now < deadline {
                w.wait(me, deadline, true);
                return Poll::Pending;
            }
            if self.timeouts > 0 && self.gave_way.is_none_or(|t| w.now < t) {
                // Usually quick; now and then the caller is descheduled for a while.
                let step = match w.rng.chance(0.2) {
                    true => w.rng.range(STEP, 5 * MS),
                    false => STEP,
                };
                let until = w.now + step;
                self.gave_way = Some(until);
                w.wait(me, until, true);
                return Poll::Pending;
            }
            self.gave_way = None;
            match w.clients[me].slots.time_out_node(self.slot) {
                Some((_, n)) => {
                    self.timeouts += 1;
                    w.struck.timeouts += u64::from(n);
                }
                None => return Poll::Ready(None),
            }
        }
    }
}

impl Drop for SimRound<'_> {
    fn drop(&mut self) {
        let mut w = self.nodes.sim.world();
        w.clients[self.nodes.me].slots.close(self.slot);
    }
}
