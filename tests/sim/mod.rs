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
//! # Processes and tasks
//!
//! A client is a task of a process ([`Proc`]): the process has the fanout, the links and the clock, shared by its
//! tasks as a manager is by a process's threads. With [`Setup::threads`], one world in three puts two or three
//! clients in each process, so their rounds meet on one connection per node (a straggler of one round's request
//! before another's, a release held or detached before another task's acquisition); otherwise each client is a
//! process of its own. A process's tasks are woken when its fanout files an outcome.
//!
//! # What a round sees: the real network machine
//!
//! Each process has the fanout's own state machine (`muxlock::net::sim::SimFanout` over `net/machine/`): its
//! rounds' requests are offered, queued, refused for room, held and detached, timed out, made patient, and their
//! outcomes filed by id, by the code the threaded fanout runs; connections are dialled, set up (the engine's
//! set-up commands go over the wire ahead of the first request, their replies are what the restart guard
//! reads), dropped as hung and dialled again by it too. This world is its wire: a dial takes the node's round trip
//! and is refused by a node that is down; each write's bytes reach the node after a latency, in order on their
//! connection (a paused node runs nothing, and a write never overtakes an earlier one), its commands run one
//! after the other and their replies' bytes go back after another latency, now and then split across two reads.
//! A connection that resets (before or after a write ran, a node going down, a partition ending) fails every
//! request it carried, on the client's side, and what was on its way to the node never runs. A client's fanout
//! that asks to be looked at (detached releases, bytes behind a connect, hung connections) gets a tick.
//!
//! Room: in one world of four, each process's fanout takes only 2, 4 or 8 requests in flight per connection
//! (`max_in_flight`, chosen per process by the seed; releases a reserve of as many again, then held for room and
//! detached if their round ends first), so ordinary rounds' requests are refused as `Overloaded` while earlier
//! ones are on the wire.
//!
//! Clocks: each client's monotonic clock drifts (within the spec's factor) and its wall clock is right (NTP); each
//! node has a wall clock of its own ([`node::NodeClock`]), by which it expires keys and answers `TIME`, right
//! unless the world has clock faults ([`Setup::clocks`]): steps forward and back, fast and stopped runs.
//!
//! A connection the client drops by itself (hung, a slow connect, a protocol error) stays open on the node's side
//! until the client dials again: what was on its way still runs there, and its replies are read by nobody.
//! Simplification: a connect completes after the node's base latency, not a slow client's own extra.
//!
//! Turn listeners ([`pushes`]): in the queued worlds each client's engine has a turn listener of its own, whose
//! connections are this world's too: the handed markers a release writes are pushed to it in the sessions the
//! world keeps, and a waiter's grant by push counts them.

pub mod calls;
pub mod check;
pub mod cleanup;
pub mod cluster;
pub mod did;
pub mod directed;
pub mod fold;
pub mod guards;
pub mod node;
pub mod owed;
pub mod owned;
pub mod pushed;
pub mod pushes;
pub mod refused_natives;
pub mod restored;
pub mod rwlock;
pub mod seeds;
pub mod semaphore;
pub mod truth;
pub mod waiter_leftovers;
pub mod wire;
pub mod workload;

use std::cell::{Cell, RefCell, RefMut};
use std::collections::{BTreeMap, BinaryHeap};
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use muxlock::net::cluster::{
    ConnRound, Conns, MapDone, MemberAddr, Members, Plan, SlotMap, Vacancies,
};
use muxlock::net::sim::{Io, SimFanout, SimRound as Exchange, Step};
use muxlock::net::{
    CommandId, NodeAddr, NodeCounts, NodeError, NodeSet, Options as NetOptions, Reply, TlsConfig,
};
use muxlock::redlock::sim::{Clock, NodeRound, Nodes};
use muxlock::resp::{Value, encode};

use node::{Acl, MS, Node, RIGHT_RATE, Restart, Time};

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
    /// Probability that a write's connection resets (half before its commands run, half after).
    pub reset: f64,
}

#[derive(Debug)]
enum Event {
    /// A write's commands reach the node (TCP: together, after what was written before on the connection).
    Deliver {
        client: usize,
        node: usize,
        generation: u32,
        /// The write's bytes, read into commands when they run (`wire`).
        bytes: Bytes,
        /// The write's place on its connection (a connection runs its writes in order).
        n: u64,
    },
    /// Bytes of replies reach the client.
    Reply {
        client: usize,
        node: usize,
        generation: u32,
        bytes: Bytes,
    },
    /// A connect the client's fanout dialled completes, or is refused (the node is down).
    Connect {
        client: usize,
        node: usize,
        generation: u32,
    },
    /// The client's fanout asked to be looked at (detached releases, unwritten bytes, hung connections).
    Tick {
        client: usize,
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
        generation: u32,
    },
    /// The user's ACL on a node changes: from now on it refuses what `denied` says ([`Node::denied`]).
    Acl {
        node: usize,
        denied: u8,
    },
    /// A node's wall clock is stepped or changes its rate.
    Clock {
        node: usize,
        change: ClockChange,
    },
    /// A cluster event (`cluster.rs`): a slot migration's start, one key moved, its end; a failover; a
    /// replica's link down or up again.
    Cluster {
        cluster: usize,
        change: ClusterChange,
    },
    /// A client's map read (`Conns::read_map`) is answered: the callback waiting in `World::maps`.
    Map {
        client: usize,
        cluster: usize,
        done: usize,
    },
    /// A handed marker's push reaches a client's turn listener (`pushes.rs`).
    Push(pushes::Push),
    /// A client's listener connection to a node is set up (`pushes.rs`).
    ListenUp {
        client: usize,
        node: usize,
    },
    /// A client's listener connection to a node drops, if still in `session` (`pushes.rs`).
    ListenDrop {
        client: usize,
        node: usize,
        session: u64,
    },
}

/// A change to a simulated cluster (see [`Event::Cluster`]).
#[derive(Clone, Copy, Debug)]
pub enum ClusterChange {
    /// Slot `slot` starts migrating from its master to master `to` (index in the cluster).
    Migrate { slot: u16, to: usize },
    /// One key of the migrating slot moves (`MIGRATE`).
    MoveKey,
    /// The migration ends: the remaining keys move, and the slot is the new master's.
    Settle,
    /// Replica `replica` takes over from its master (`unaware`: the old master, paused, learns of it only at that
    /// instant, and serves its old slots as a master meanwhile).
    Failover {
        replica: usize,
        unaware: Option<Time>,
    },
    /// A deposed master learns of the takeover: it follows the new master, with a full sync.
    Learn { node: usize },
    /// Replica `replica`'s link goes down (`false`) or comes back with a full sync (`true`).
    Link { replica: usize, up: bool },
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

/// The wire of one client's connection to a node, as the simulator carries it: the connection the client's
/// fanout dialled last (`generation`) while the node side still serves it.
#[derive(Debug, Default)]
struct Line {
    generation: Option<u32>,
    last_deliver: Time,
    last_reply: Time,
    /// Writes sent on this connection, and writes run (or dropped by a reset) on the node: a write runs only when
    /// every earlier one has, as on a TCP connection, however pauses held them back.
    sent: u64,
    ran: u64,
    /// The connection sent `ASKING` just before (a cluster node serves the next command of an importing slot).
    asking: bool,
    /// When bytes of this connection last reached the client (or it was dialled): the hung check may drop it
    /// only `hung_timeout` after that.
    read_at: Time,
    /// The client dropped it by itself, and the drop was judged (`World::judge_drops`).
    judged: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    NotStarted,
    Running,
    Blocked,
    Done,
}

/// A simulated client process: one fanout (the real machine), its links, its clock; shared by its tasks, as a
/// manager is by the threads of a process.
#[derive(Debug)]
struct Proc {
    /// The real fanout's machine, driven by this world's wire.
    fanout: SimFanout,
    lines: Vec<Line>,
    /// When a tick is due for the fanout, if one is pushed.
    tick_at: Option<Time>,
    /// Outcomes its fanout had filed when its tasks were last woken.
    filed: u64,
    /// The tasks (clients) that share it.
    tasks: Vec<usize>,
    /// Its clock rate (drift).
    rate: f64,
    /// A slow link of this process's own: to node `.0`, `.1` more each way (a client far away, or one that
    /// reads its replies late), in durable worlds.
    slow: Option<(usize, Time)>,
    /// Directed histories only: a fixed one-way latency to each node (replacing the drawn one), and the instant
    /// from which messages to a node are lost (a black hole: the round times out).
    fixed: Vec<Option<Time>>,
    /// Partitions of this process's link to each node, `[from, until)`: a request arriving then is lost in flight,
    /// and the connection resets when the partition ends (as TCP gives up on it).
    cuts: Vec<Vec<(Time, Time)>>,
}

/// A simulated client: a task of a process, running one workload (its rounds go through its process's fanout).
#[derive(Debug)]
struct Client {
    /// Its process (`World::procs`).
    process: usize,
    state: State,
    /// Something was filed for this client's process since it began to wait.
    ready: bool,
    /// What wakes a waiting client: virtual time reaching `until`, or (unless it sleeps) something filed.
    until: Time,
    sleeping: bool,
    /// Every pause it asked its clock for, in order: its own and its engine's (the retries'), which
    /// `calls.rs` tells apart by when they came.
    pauses: Vec<Duration>,
    /// The call of the engine it is in, if `calls.rs` opened one: judged while it lasts too, so that a call that
    /// retries or waits for ever breaks the history instead of running the world for ever.
    pub call: Option<Open>,
    /// Every command its rounds handed to its fanout, to which node, since `calls.rs` last forgot them (as a
    /// call begins): what the call sent, whatever became of it on the wire.
    offered: Vec<Offer>,
}

/// A command a client's round handed to its fanout for one node (connection), which took it.
#[derive(Debug)]
pub struct Offer {
    pub conn: usize,
    pub cmd: Vec<Bytes>,
}

/// A call of the engine under way (`calls.rs`), and its limits.
#[derive(Clone, Copy, Debug)]
pub struct Open {
    pub what: &'static str,
    /// When it began, and how many pauses its client had asked for then.
    pub at: Time,
    pub paused: usize,
    /// How many pauses (retries) it may take.
    pub retries: usize,
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
    /// Calls of the engine judged as they returned (`calls.rs`), those that paused to retry, and, in calm
    /// worlds, those that had to succeed (an acquisition of what was free, an extension or release of what every
    /// node held).
    pub calls: u64,
    pub retried: u64,
    pub judged_calm: u64,
    /// Outcomes of calls' reports held against what their node did (`truth.rs`): granted (or quarantined),
    /// refused (taken, not held), and not sent.
    pub truths: [u64; 3],
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
    /// Sessions some of whose releases went out folded, every release of them confirmed.
    pub folded_confirmed: u64,
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
    /// Connections the clients' fanouts dialled after their first to a node (reconnects, each with its set-up),
    /// and release requests (counted by reply) held for room when their round ended and detached.
    pub redials: u64,
    pub detached: u64,
    /// Cluster members: `-MOVED` and `-ASK` replies, slot migrations begun, failovers (and those to a replica
    /// that lacked its master's latest writes), replication checks' `WAIT`s.
    pub moved: u64,
    pub asked: u64,
    pub migrations: u64,
    pub failovers: u64,
    pub failovers_lacking: u64,
    /// `NOSCRIPT` replies read after their round had ended or had timed their node out (dropped as late: an
    /// extension decided without that node, whose key there keeps its old expiry).
    pub noscript_late: u64,
    /// Commands refused by the nodes' ACLs (`-NOPERM`), by kind (`node::Acl`'s bits: scripts, `EVALSHA` alone,
    /// `TIME`, `INFO`, native compare-and-delete, `COMMAND`).
    pub noperm: [u64; Acl::KINDS],
    /// Release verdicts judged on the nodes as they were returned (`workload::released`), and those confirmed
    /// while a node kept the key (refused, timed out, paused, never reached: one the count did not include).
    pub releases_judged: u64,
    pub kept_after_release: u64,
    /// Locks granted by batch acquisitions (`try_lock_batch`), those of them whose batch release
    /// (`unlock_batch`) was confirmed, and plain locks' extensions confirmed.
    pub batch_grants: u64,
    pub batch_releases: u64,
    /// Locks held on plain members of managers that also have cluster members, with the clock check on.
    pub plain_grants_beside_clusters: u64,
    /// Locks granted under the replication check of cluster members' votes that the plain members alone could
    /// not have granted.
    pub grants_by_checked_clusters: u64,
    pub extensions: u64,
    /// Map reads of cluster members' maps (a refresh after `MOVED`, a failed connection or an unserved slot).
    pub map_reads: u64,
    /// Handed markers the nodes wrote, their pushes taken by a turn listener, and those lost (not set up as the
    /// marker was written, the connection dropped or cut before the push came); listener connections dropped
    /// (`pushes.rs`).
    pub pushes: [u64; 3],
    pub listener_drops: u64,
}

impl Struck {
    /// Adds another run's counts to these (the earliest counter loss of the two).
    pub fn add(&mut self, s: &Struck) {
        self.timeouts += s.timeouts;
        self.resets_before += s.resets_before;
        self.resets_after += s.resets_after;
        self.refused += s.refused;
        self.overloaded += s.overloaded;
        self.restarts += s.restarts;
        self.pauses += s.pauses;
        self.noscript += s.noscript;
        self.late += s.late;
        self.lost += s.lost;
        self.guard_checks += s.guard_checks;
        self.guards_lost += s.guards_lost;
        self.guard_renewals += s.guard_renewals;
        self.reentrant_checks += s.reentrant_checks;
        self.owned_sessions += s.owned_sessions;
        self.owned_checks += s.owned_checks;
        self.owned_extensions += s.owned_extensions;
        self.owned_lost += s.owned_lost;
        self.outer_released_first += s.outer_released_first;
        self.native_calls += s.native_calls;
        self.tokens_checked += s.tokens_checked;
        self.folded_rounds += s.folded_rounds;
        self.folded += s.folded;
        self.folded_confirmed += s.folded_confirmed;
        self.expired_released += s.expired_released;
        self.cut_releases += s.cut_releases;
        self.clock_changes += s.clock_changes;
        self.clock_slews += s.clock_slews;
        self.time_ahead += s.time_ahead;
        self.time_behind += s.time_behind;
        self.time_off_majority += s.time_off_majority;
        self.time_within += s.time_within;
        self.redials += s.redials;
        self.detached += s.detached;
        self.moved += s.moved;
        self.asked += s.asked;
        self.migrations += s.migrations;
        self.failovers += s.failovers;
        self.failovers_lacking += s.failovers_lacking;
        self.noscript_late += s.noscript_late;
        self.releases_judged += s.releases_judged;
        self.kept_after_release += s.kept_after_release;
        self.batch_grants += s.batch_grants;
        self.batch_releases += s.batch_releases;
        self.plain_grants_beside_clusters += s.plain_grants_beside_clusters;
        self.grants_by_checked_clusters += s.grants_by_checked_clusters;
        self.extensions += s.extensions;
        self.map_reads += s.map_reads;
        self.calls += s.calls;
        self.retried += s.retried;
        self.judged_calm += s.judged_calm;
        for (sum, k) in self.truths.iter_mut().zip(s.truths) {
            *sum += k;
        }
        for (sum, k) in self.noperm.iter_mut().zip(s.noperm) {
            *sum += k;
        }
        for (sum, k) in self.pushes.iter_mut().zip(s.pushes) {
            *sum += k;
        }
        self.listener_drops += s.listener_drops;
        self.counters_lost_at = match (self.counters_lost_at, s.counters_lost_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// What a write's replies are encoded into at first: enough for most (a set-up's are about 1 KiB).
const REPLY_CAPACITY: usize = 1024;

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
    procs: Vec<Proc>,
    addrs: Rc<[NodeAddr]>,
    base: Instant,
    runs: u64,
    /// The clients' clock tolerance (the clock check's `T`), for the counts.
    tolerance: Time,
    /// Clocks step back as planned (see [`Setup::steps_back`]).
    steps_back: bool,
    pub struck: Struck,
    pub history: check::History,
    /// The members the clients' managers have: plain nodes, or simulated clusters (`cluster.rs`).
    pub members: Vec<Member>,
    pub clusters: Vec<cluster::Cluster>,
    /// Per node: its cluster and its place there.
    pub cluster_of: Vec<Option<(usize, usize)>>,
    /// Map reads waiting for their answer ([`Event::Map`]).
    maps: Vec<MapWait>,
    /// When each client last began to read each cluster's map, on the client's clock (`SimNodes::read_map`).
    map_read_at: BTreeMap<(usize, usize), Instant>,
    /// The options every client's fanout starts from.
    opts: Rc<NetOptions>,
    /// The members' layout, in worlds with cluster members.
    layout: Option<Rc<cluster::Layout>>,
    /// A calm world ([`Setup::calm`]) and whether one of its nodes is slow: no fault at all, and every pause a client asks for cut to
    /// [`CALM_PAUSE`], so that nothing it holds expires on it.
    pub calm: bool,
    pub slow_node: bool,
    /// The clients' turn listeners and the pushes on their way (`pushes.rs`).
    pub listening: pushes::Listening,
}

/// The longest pause a client takes in a calm world ([`Setup::calm`]).
pub const CALM_PAUSE: Duration = Duration::from_millis(5);

/// The one-way latency of a calm world's slow node, if it has one ([`Setup::calm`]).
pub const CALM_SLOW: Time = 20 * MS;

/// The routing's least time between two map reads of one member (`net/cluster/route/mod.rs`'s `MIN_REFRESH`).
const MIN_REFRESH: Duration = Duration::from_millis(100);

/// A map read waiting for its answer (taken when answered).
struct MapWait(Option<MapDone>);

impl std::fmt::Debug for MapWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "MapWait"
        } else {
            "MapWait(answered)"
        })
    }
}

/// A member of the clients' managers.
#[derive(Clone, Copy, Debug)]
pub enum Member {
    /// A plain node.
    Node(usize),
    /// A simulated cluster.
    Cluster(usize),
}

impl World {
    /// Every pause client `client` asked its clock for so far (its own and its engine's), in order.
    pub fn pauses(&self, client: usize) -> &[Duration] {
        &self.clients[client].pauses
    }

    /// The commands client `client`'s rounds handed to its fanout since [`World::forget_offers`].
    pub fn offered(&self, client: usize) -> &[Offer] {
        &self.clients[client].offered
    }

    /// Forgets what client `client` sent so far (a call begins).
    pub fn forget_offers(&mut self, client: usize) {
        self.clients[client].offered.clear();
    }

    /// Notes that client `client`'s fanout took `request` for each connection of `conns`.
    fn note_offers(&mut self, client: usize, conns: NodeSet, request: &[u8]) {
        if conns == NodeSet::EMPTY {
            return;
        }
        let mut cmds = Vec::new();
        wire::each_command(request, |cmd| {
            cmds.push(
                cmd.iter()
                    .map(|a| Bytes::copy_from_slice(a))
                    .collect::<Vec<_>>(),
            )
        });
        for conn in (0..self.nodes.len()).filter(|&c| conns.contains(c)) {
            for cmd in &cmds {
                let cmd = cmd.clone();
                self.clients[client].offered.push(Offer { conn, cmd });
            }
        }
    }

    /// Opens (or with `None`, closes) the call client `client` is in.
    pub fn open(&mut self, client: usize, call: Option<Open>) {
        self.clients[client].call = call;
    }

    /// Breaks the history if client `client`'s open call has paused past its retries.
    fn judge_call(&mut self, client: usize) {
        let Some(c) = self.clients[client].call else {
            return;
        };
        let paused = self.clients[client].pauses.len() - c.paused;
        if paused <= c.retries {
            return;
        }
        let what = format!("paused {paused} times, past its {} retries", c.retries);
        self.clients[client].call = None;
        let line = format!("c{client}'s {} at {} ms {what}", c.what, c.at / MS);
        self.history.breaks(line);
    }

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

    /// Counts what the clients' fanouts did into [`Struck::redials`] and [`Struck::detached`] (at the end).
    pub fn count_net(&mut self) {
        for p in &self.procs {
            for node in 0..self.nodes.len() {
                let c = p.fanout.counts(node);
                self.struck.redials += c.connects.saturating_sub(1);
                self.struck.detached += c.detached;
            }
        }
    }

    /// A client's instant for virtual time `t`.
    pub fn instant(&self, client: usize, t: Time) -> Instant {
        self.at(self.clients[client].process, t)
    }

    /// The virtual time of a client's instant.
    pub fn time(&self, client: usize, at: Instant) -> Time {
        self.time_of(self.clients[client].process, at)
    }

    /// Process `p`'s instant for virtual time `t`.
    fn at(&self, p: usize, t: Time) -> Instant {
        let rate = self.procs[p].rate;
        self.base + Duration::from_nanos((t as f64 * rate) as u64)
    }

    /// The virtual time of process `p`'s instant.
    fn time_of(&self, p: usize, at: Instant) -> Time {
        let rate = self.procs[p].rate;
        (at.saturating_duration_since(self.base).as_nanos() as f64 / rate) as Time
    }

    /// Directed histories: every message between `client` and `node` takes exactly `latency`, and the node's own
    /// faults (spikes, resets) are off.
    pub fn fix_link(&mut self, client: usize, node: usize, latency: Time) {
        let p = &mut self.procs[self.clients[client].process];
        p.fixed[node] = Some(latency);
        p.slow = None;
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
        let p = self.clients[client].process;
        self.procs[p].cuts[node].push((from, until));
    }

    fn latency(&mut self, p: usize, node: usize) -> Time {
        if let Some(fixed) = self.procs[p].fixed[node] {
            return fixed;
        }
        let extra = match self.procs[p].slow {
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

    /// Resets `client`'s connection to `node`, on both sides: what it carried fails ([`NodeError::Closed`]), and
    /// what was on its way to the node never runs.
    fn reset(&mut self, client: usize, node: usize) {
        let Some(generation) = self.procs[client].lines[node].generation.take() else {
            return;
        };
        let at = self.at(client, self.now);
        self.procs[client].fanout.reset(node, generation, at);
        self.pump(client);
    }

    /// Carries out what `client`'s fanout asked of the wire since last time (dials, writes), pushes its next
    /// tick if it asked to be looked at, and marks the client ready (an outcome may have been filed).
    fn pump(&mut self, client: usize) {
        let now = self.now;
        let io = self.procs[client].fanout.take_io();
        for io in io {
            match io {
                Io::Dial { node, generation } => {
                    // A new connection: the node side of the one before is gone (a fanout dials again only after
                    // it dropped it).
                    self.procs[client].lines[node] = Line {
                        generation: Some(generation),
                        last_deliver: now,
                        last_reply: now,
                        sent: 0,
                        ran: 0,
                        asking: false,
                        read_at: now,
                        judged: false,
                    };
                    // The handshake takes the node's base latency (not a slow client's own extra, which models
                    // a late reader).
                    let lat = self.node_latency(node);
                    let event = Event::Connect {
                        client,
                        node,
                        generation,
                    };
                    self.push(now + lat, event);
                }
                Io::Write {
                    node,
                    generation,
                    bytes,
                } => {
                    if self.procs[client].lines[node].generation != Some(generation) {
                        continue;
                    }
                    let lat = self.latency(client, node);
                    let line = &mut self.procs[client].lines[node];
                    let at = (now + lat).max(line.last_deliver);
                    line.last_deliver = at;
                    let n = line.sent;
                    line.sent += 1;
                    let event = Event::Deliver {
                        client,
                        node,
                        generation,
                        bytes,
                        n,
                    };
                    self.push(at, event);
                }
            }
        }
        let at = self.at(client, now);
        let due = self.procs[client].fanout.due(at);
        if let Some(due) = due.map(|d| self.time_of(client, d).max(now + 1)) {
            let c = &mut self.procs[client];
            if c.tick_at.is_none_or(|t| t > due) {
                c.tick_at = Some(due);
                self.push(due, Event::Tick { client });
            }
        }
        self.judge_drops(client);
        // Its tasks look again if anything was filed (for any of their rounds).
        let filed = self.procs[client].fanout.filed();
        if filed != self.procs[client].filed {
            self.procs[client].filed = filed;
            for i in 0..self.procs[client].tasks.len() {
                let task = self.procs[client].tasks[i];
                self.clients[task].ready = true;
            }
        }
    }

    /// The liveness rules of process `p`'s fanout, judged after each of its turns: a connection it dropped by
    /// itself as hung had been silent for `hung_timeout` (a node that is slow but sends bytes is never dropped),
    /// and no release detached from its round waits for room past its bound (it is placed or given up by then).
    fn judge_drops(&mut self, p: usize) {
        let now = self.now;
        let rate = self.procs[p].rate;
        let hung = self.procs[p].fanout.options().hung_timeout().as_nanos() as f64;
        for node in 0..self.nodes.len() {
            let line = &self.procs[p].lines[node];
            let Some(generation) = line.generation else {
                continue;
            };
            let fanout = &self.procs[p].fanout;
            if line.judged || fanout.generation(node) == Some(generation) {
                continue;
            }
            let silent = now - line.read_at;
            let hung_up = matches!(fanout.last_error(node), Some(NodeError::Hung(_)));
            self.procs[p].lines[node].judged = true;
            // The client's clock runs at `rate`: it measured `silent * rate` (a microsecond for rounding).
            if hung_up && (silent as f64 * rate) + 1_000.0 < hung {
                let what = format!(
                    "process {p} dropped its connection to node {node} as hung {} after bytes came (hung_timeout \
                     {} ms)",
                    check::ms(silent),
                    hung / MS as f64
                );
                self.history.breaks(what);
            }
        }
        let bound = self.procs[p].fanout.detached_bound();
        if let Some(bound) = bound.map(|b| self.time_of(p, b)) {
            if bound + MS < now {
                let what = format!(
                    "process {p} keeps a detached release waiting {} past its bound",
                    check::ms(now - bound)
                );
                self.history.breaks(what);
            }
        }
    }

    /// Sends `bytes` of replies from `node` back to `client` after the link's latency, in order on the connection.
    fn reply(&mut self, client: usize, node: usize, generation: u32, bytes: Bytes) {
        let lat = self.latency(client, node);
        let line = &mut self.procs[client].lines[node];
        let at = (self.now + lat).max(line.last_reply);
        line.last_reply = at;
        let event = Event::Reply {
            client,
            node,
            generation,
            bytes,
        };
        self.push(at, event);
    }

    fn apply(&mut self, event: Event) {
        let now = self.now;
        match event {
            Event::Deliver {
                client,
                node,
                generation,
                bytes,
                n,
            } => {
                let line = &self.procs[client].lines[node];
                if line.generation != Some(generation) || self.nodes[node].down {
                    return;
                }
                let cut = self.procs[client].cuts[node]
                    .iter()
                    .find(|&&(from, until)| from <= now && now < until)
                    .copied();
                if let Some((_, until)) = cut {
                    // Lost in flight: it never runs and no reply comes (the round times the node out); the
                    // connection resets when the partition ends, unless something reset it before.
                    self.struck.lost += 1;
                    if until < Time::MAX {
                        let event = Event::Mend {
                            client,
                            node,
                            generation,
                        };
                        self.push(until, event);
                    }
                    return;
                }
                // A paused node runs nothing, and a write never overtakes an earlier one of its connection (one a
                // pause held back): it waits until the pause ends, or behind the earlier one (requeued at the same
                // instant, it comes after it).
                let paused_until = self.nodes[node].paused_until;
                if paused_until > now || n != line.ran {
                    let event = Event::Deliver {
                        client,
                        node,
                        generation,
                        bytes,
                        n,
                    };
                    self.push(paused_until.max(now), event);
                    return;
                }
                self.procs[client].lines[node].ran += 1;
                let reset = self.nodes[node].faults.reset;
                if self.rng.chance(reset / 2.0) {
                    self.struck.resets_before += 1;
                    self.reset(client, node);
                    return;
                }
                let mut out = BytesMut::with_capacity(REPLY_CAPACITY);
                let in_cluster = self.cluster_of.get(node).copied().flatten();
                wire::each_command(&bytes, |cmd| {
                    if cmd.first().is_some_and(|c| c == b"TIME")
                        && self.nodes[node].node.denied & Acl::TIME == 0
                    {
                        self.count_time(node);
                        self.nodes[node].node.time_reply(now, &mut out);
                        return;
                    }
                    let reply = match in_cluster {
                        None => self.nodes[node].node.exec(cmd, now),
                        Some(at) => self.cluster_exec(client, node, at, cmd),
                    };
                    if !self.nodes[node].node.markers.is_empty() {
                        self.push_markers(node);
                    }
                    if matches!(&reply, Value::Error(m) if m.starts_with(b"NOSCRIPT")) {
                        self.struck.noscript += 1;
                    }
                    encode(&reply, &mut out);
                });
                if self.rng.chance(reset / 2.0) {
                    self.struck.resets_after += 1;
                    self.reset(client, node);
                    return;
                }
                let mut bytes = out.freeze();
                // Now and then the replies arrive in two reads, cut anywhere (a reply split across them).
                if bytes.len() > 1 && self.rng.chance(0.1) {
                    let at = self.rng.range(1, bytes.len() as u64 - 1) as usize;
                    let first = bytes.split_to(at);
                    self.reply(client, node, generation, first);
                }
                self.reply(client, node, generation, bytes);
            }
            Event::Reply {
                client,
                node,
                generation,
                bytes,
            } => {
                let at = self.at(client, now);
                let line = &mut self.procs[client].lines[node];
                if line.generation == Some(generation) {
                    line.read_at = now;
                }
                let fanout = &mut self.procs[client].fanout;
                let late = fanout.late();
                fanout.read(node, generation, &bytes, at);
                let dropped = fanout.late() - late;
                self.struck.late += dropped;
                if dropped > 0 && bytes.windows(9).any(|b| b == b"-NOSCRIPT") {
                    self.struck.noscript_late += 1;
                }
                self.pump(client);
            }
            Event::Connect {
                client,
                node,
                generation,
            } => {
                if self.procs[client].lines[node].generation != Some(generation) {
                    return;
                }
                let at = self.at(client, now);
                if self.nodes[node].down {
                    self.struck.refused += 1;
                    self.procs[client].lines[node].generation = None;
                    let fanout = &mut self.procs[client].fanout;
                    fanout.connect_failed(node, generation, NodeError::Refused, at);
                    // A refused connect is dropped at once, failing what waited on it (the refusal is the node's
                    // vote), not left to its connect timeout.
                    if fanout.generation(node) == Some(generation) || fanout.in_flight(node) > 0 {
                        let what = format!(
                            "process {client}'s refused connect to node {node} left {} requests waiting on it",
                            fanout.in_flight(node)
                        );
                        self.history.breaks(what);
                    }
                } else {
                    self.procs[client].fanout.connected(node, generation, at);
                }
                self.pump(client);
            }
            Event::Tick { client } => {
                if self.procs[client].tick_at != Some(now) {
                    return;
                }
                self.procs[client].tick_at = None;
                let at = self.at(client, now);
                self.procs[client].fanout.turn(at);
                self.pump(client);
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
                for p in 0..self.procs.len() {
                    self.reset(p, node);
                }
                self.listeners_down(node);
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
                self.listeners_back(node);
                let line = format!("{} node {node} is back ({kind:?})", check::ms(now));
                self.history.note(line);
                if let Some((c, i)) = self.cluster_of.get(node).copied().flatten() {
                    self.cluster_restarted(c, i);
                    if kind != Restart::KeepAll {
                        self.migrate_soon(c, i);
                    }
                }
            }
            Event::Flush { node } => self.nodes[node].node.flush_scripts(),
            Event::Snapshot { node } => self.nodes[node].node.take_snapshot(),
            Event::Mend {
                client,
                node,
                generation,
            } => {
                if self.procs[client].lines[node].generation == Some(generation) {
                    self.reset(client, node);
                    self.listeners_reset(client, node);
                }
            }
            Event::Clock { node, change } => self.change_clock(node, change),
            Event::Cluster { cluster, change } => self.change_cluster(cluster, change),
            Event::Acl { node, denied } => {
                self.nodes[node].node.denied = denied;
                let line = format!(
                    "{} node {node}'s ACL refuses 0b{denied:02b}",
                    check::ms(now)
                );
                self.history.note(line);
            }
            Event::Map {
                client,
                cluster,
                done,
            } => {
                let Some(done) = self.maps.get_mut(done).and_then(|m| m.0.take()) else {
                    return;
                };
                let c = &self.clusters[cluster];
                let up = c.nodes.iter().copied().find(|&n| !self.nodes[n].down);
                let map = up.and_then(|n| {
                    let map = SlotMap::from_slots_reply(&c.slots_reply()).ok()?;
                    Some((map, cluster::host(n)))
                });
                let at = self.at(client, now);
                done(map, &|| at);
            }
            Event::Push(push) => self.push_to(push),
            Event::ListenUp { client, node } => self.listen_up(client, node),
            Event::ListenDrop {
                client,
                node,
                session,
            } => self.listen_drop(client, node, session),
        }
    }

    /// Runs `cmd` on `node`, place `at` (cluster, index) of a simulated cluster, for `client`'s connection: the
    /// cluster's routing first (`cluster.rs`), then the node, then the effects copied to its linked replicas.
    fn cluster_exec(
        &mut self,
        client: usize,
        node: usize,
        at: (usize, usize),
        cmd: &[&[u8]],
    ) -> Value {
        let now = self.now;
        let asking = std::mem::take(&mut self.procs[client].lines[node].asking);
        let (c, i) = at;
        let route = {
            let (clusters, nodes) = (&self.clusters, &mut self.nodes);
            let n = &mut nodes[node].node;
            clusters[c].route(i, cmd, asking, |k| n.has(k, now))
        };
        match route {
            cluster::Route::Reply(v) => {
                if cmd
                    .first()
                    .is_some_and(|v| v.eq_ignore_ascii_case(b"ASKING"))
                {
                    self.procs[client].lines[node].asking = true;
                }
                if let Value::Error(e) = &v {
                    if e.starts_with(b"MOVED") {
                        self.struck.moved += 1;
                    } else if e.starts_with(b"ASK") {
                        self.struck.asked += 1;
                    }
                }
                v
            }
            cluster::Route::Run(keys) => {
                let reply = self.nodes[node].node.exec(cmd, now);
                if cmd.first().is_some_and(|v| v.eq_ignore_ascii_case(b"INFO")) {
                    if let Value::BulkString(text) = &reply {
                        let more = self.clusters[c].info_replication(i);
                        let mut all = String::from_utf8_lossy(text).into_owned();
                        all.push_str(&more);
                        return Value::BulkString(Bytes::from(all));
                    }
                }
                if !keys.is_empty() {
                    self.replicate(c, i, &keys);
                }
                reply
            }
        }
    }

    /// Node `i` of cluster `c` is back: a replica syncs from its master (if linked); a master has a new
    /// replication id, and its linked replicas sync from it.
    fn cluster_restarted(&mut self, c: usize, i: usize) {
        // A deposed master learns of it as it comes back.
        self.clusters[c].unaware[i] = None;
        let cl = &self.clusters[c];
        match cl.replica_of[i] {
            Some(m) => {
                let (from, to) = (cl.nodes[m], cl.nodes[i]);
                if cl.linked[i] && !self.nodes[from].down {
                    self.full_sync(from, to);
                }
            }
            None => {
                let from = cl.nodes[i];
                let replicas: Vec<usize> = cl
                    .replicas(i)
                    .filter(|&r| cl.linked[r])
                    .map(|r| cl.nodes[r])
                    .collect();
                let fresh = format!("{:040x}", self.rng.next() as u128 * 0x9e37_79b9);
                self.clusters[c].replid[i] = fresh;
                self.clusters[c].replid2[i] = None;
                for r in replicas {
                    if !self.nodes[r].down {
                        self.full_sync(from, r);
                    }
                }
            }
        }
    }

    /// Half the time, a slot of a resource that master `i` of cluster `c` serves, back without its data, migrates
    /// off it within 1.5 s (an operator rebalancing): what it forgot then moves with the slot to a master that
    /// never restarted (`Cluster::slot_lost_at`), the case the restart guard's slot quarantine is for.
    fn migrate_soon(&mut self, c: usize, i: usize) {
        let cl = &self.clusters[c];
        if cl.replica_of[i].is_some() || !self.rng.chance(0.5) {
            return;
        }
        let served: Vec<u16> = resource_slots()
            .into_iter()
            .filter(|&s| cl.owner[s as usize] as usize == i)
            .collect();
        if served.is_empty() {
            return;
        }
        let slot = served[self.rng.range(0, served.len() as u64 - 1) as usize];
        let to = self.rng.range(0, cl.nodes.len() as u64 - 1) as usize;
        let start = self.now + self.rng.range(0, 1_500) * MS;
        let span = self.rng.range(20, 400) * MS;
        let change = |change| Event::Cluster { cluster: c, change };
        self.push(start, change(ClusterChange::Migrate { slot, to }));
        self.push(start + span / 2, change(ClusterChange::MoveKey));
        self.push(start + span, change(ClusterChange::Settle));
    }

    /// Copies `keys` as master `i` of cluster `c` has them to its linked replicas (effects replication).
    fn replicate(&mut self, c: usize, i: usize, keys: &[Bytes]) {
        let replicas: Vec<usize> = {
            let cl = &self.clusters[c];
            cl.replicas(i)
                .filter(|&r| cl.linked[r])
                .map(|r| cl.nodes[r])
                .collect()
        };
        let from = self.clusters[c].nodes[i];
        for r in replicas {
            for k in keys {
                let entry = self.nodes[from].node.keys.get(k).cloned();
                let to = &mut self.nodes[r].node.keys;
                match entry {
                    Some(e) => {
                        to.insert(k.clone(), e);
                    }
                    None => {
                        to.remove(k);
                    }
                }
            }
        }
    }

    /// Node `to` takes `from`'s whole keyspace (a full sync), and with it what `from` lost: if `from` came back
    /// without its data, so did `to`, for the checker.
    fn full_sync(&mut self, from: usize, to: usize) {
        let keys = self.nodes[from].node.keys.clone();
        self.nodes[to].node.keys = keys;
        let lost = self.nodes[from]
            .lost_data_at
            .max(self.nodes[to].lost_data_at);
        self.nodes[to].lost_data_at = lost;
    }

    /// Applies a change to cluster `c` now.
    fn change_cluster(&mut self, c: usize, change: ClusterChange) {
        let now = self.now;
        match change {
            ClusterChange::Migrate { slot, to } => {
                let cl = &mut self.clusters[c];
                let from = cl.owner[slot as usize] as usize;
                // To the master drawn, else to another one.
                let other = |k: usize| k != from && cl.replica_of[k].is_none();
                let Some(to) = Some(to)
                    .filter(|&k| other(k))
                    .or_else(|| (0..cl.nodes.len()).find(|&k| other(k)))
                else {
                    return;
                };
                if cl.migrating.is_some() || cl.unaware.iter().any(Option::is_some) {
                    return;
                }
                // Not from or to a master that is down (`CLUSTER SETSLOT` needs both). One that came back
                // without its data may be either: what it lost moves with the slot (`slot_lost_at`).
                let (a, b) = (cl.nodes[from], cl.nodes[to]);
                if self.nodes[a].down || self.nodes[b].down {
                    return;
                }
                let cl = &mut self.clusters[c];
                cl.migrating = Some((slot, from, to));
                let (a, b) = (cl.nodes[from], cl.nodes[to]);
                self.struck.migrations += 1;
                let line = format!(
                    "{} cluster {c}: slot {slot} migrates from node {a} to node {b}",
                    check::ms(now)
                );
                self.history.note(line);
            }
            ClusterChange::MoveKey | ClusterChange::Settle => {
                let Some((slot, from, to)) = self.clusters[c].migrating else {
                    return;
                };
                let (a, b) = (self.clusters[c].nodes[from], self.clusters[c].nodes[to]);
                // `MIGRATE` needs both up: a key moves later, the migration ends once both are back.
                if self.nodes[a].down || self.nodes[b].down {
                    if let ClusterChange::Settle = change {
                        self.push(now + 100 * MS, Event::Cluster { cluster: c, change });
                    }
                    return;
                }
                let keys: Vec<Bytes> = self.nodes[a]
                    .node
                    .keys
                    .keys()
                    .filter(|k| muxlock::net::cluster::key_slot(k) == slot)
                    .cloned()
                    .collect();
                let take = match change {
                    ClusterChange::MoveKey => keys.len().min(1),
                    _ => keys.len(),
                };
                for k in &keys[..take] {
                    // `MIGRATE`: the key with its expiry, gone from the source.
                    self.nodes[a].node.expire_all(now);
                    if let Some(e) = self.nodes[a].node.keys.remove(k) {
                        self.nodes[b].node.keys.insert(k.clone(), e);
                    }
                }
                self.replicate(c, from, &keys[..take]);
                self.replicate(c, to, &keys[..take]);
                if let ClusterChange::Settle = change {
                    let lost = self.nodes[a].lost_data_at;
                    let cl = &mut self.clusters[c];
                    if let Some(t) = lost {
                        let at = cl.slot_lost_at.entry(slot).or_insert(t);
                        *at = (*at).max(t);
                    }
                    cl.owner[slot as usize] = to as u8;
                    cl.migrating = None;
                    let line = format!("{} cluster {c}: slot {slot} is node {b}'s", check::ms(now));
                    self.history.note(line);
                }
            }
            ClusterChange::Failover { replica, unaware } => {
                let cl = &self.clusters[c];
                let Some(m) = cl.replica_of[replica] else {
                    return;
                };
                if cl.migrating.is_some_and(|(_, f, t)| f == m || t == m)
                    || cl.unaware.iter().any(Option::is_some)
                {
                    return;
                }
                // A deposed master that has not learnt it yet keeps what it believes (its slots, its replicas).
                let stale = unaware.map(|_| cluster::Stale {
                    owner: cl.owner.clone(),
                    replicas: cl.replicas(m).collect(),
                    replid: cl.replid[m].clone(),
                });
                let (rn, mn) = (cl.nodes[replica], cl.nodes[m]);
                if self.nodes[rn].down {
                    return;
                }
                self.struck.failovers += 1;
                let fresh = format!(
                    "{:040x}",
                    self.rng.next() as u128 * 0x9e37_79b9 + now as u128
                );
                let lacking = !cl.linked[replica];
                if lacking {
                    self.struck.failovers_lacking += 1;
                    // It lacks writes its master took: as a node back without its data, for the checker.
                    self.nodes[rn].lost_data_at = Some(now);
                }
                let cl = &mut self.clusters[c];
                cl.replid2[replica] = Some(cl.replid[m].clone());
                cl.replid[replica] = fresh;
                cl.replica_of[replica] = None;
                cl.linked[replica] = true;
                for s in cl.owner.iter_mut() {
                    if *s as usize == m {
                        *s = replica as u8;
                    }
                }
                // The old master and its other replicas follow the new one, with a full sync.
                let followers: Vec<usize> = (0..cl.nodes.len())
                    .filter(|&k| k == m || cl.replica_of[k] == Some(m))
                    .collect();
                for &k in &followers {
                    cl.replica_of[k] = Some(replica);
                    cl.replid2[k] = None;
                }
                let linked: Vec<usize> = followers
                    .iter()
                    .filter(|&&k| cl.linked[k] || k == m && stale.is_none())
                    .map(|&k| cl.nodes[k])
                    .collect();
                if let (Some(stale), Some(at)) = (stale, unaware) {
                    cl.unaware[m] = Some(stale);
                    let learn = ClusterChange::Learn { node: m };
                    self.push(
                        at.max(now + 1),
                        Event::Cluster {
                            cluster: c,
                            change: learn,
                        },
                    );
                }
                self.clusters[c].linked[m] = !self.nodes[mn].down;
                for k in linked {
                    if !self.nodes[k].down {
                        self.full_sync(rn, k);
                    }
                }
                self.history.note(format!(
                    "{} cluster {c}: node {rn} takes over from node {mn}{}{}",
                    check::ms(now),
                    match lacking {
                        true => " without its latest writes",
                        false => "",
                    },
                    match unaware {
                        Some(at) => format!(", which learns it at {}", check::ms(at)),
                        None => String::new(),
                    }
                ));
            }
            ClusterChange::Learn { node } => {
                let cl = &mut self.clusters[c];
                if cl.unaware[node].take().is_none() {
                    return;
                }
                let Some(m) = cl.replica_of[node] else {
                    return;
                };
                let (from, to) = (cl.nodes[m], cl.nodes[node]);
                cl.linked[node] = true;
                if !self.nodes[from].down && !self.nodes[to].down {
                    self.full_sync(from, to);
                }
                let line = format!(
                    "{} cluster {c}: node {to} learns it follows node {from}",
                    check::ms(now)
                );
                self.history.note(line);
            }
            ClusterChange::Link { replica, up } => {
                let cl = &mut self.clusters[c];
                let Some(m) = cl.replica_of[replica] else {
                    return;
                };
                if cl.unaware[replica].is_some() {
                    return;
                }
                cl.linked[replica] = up;
                let (rn, mn) = (cl.nodes[replica], cl.nodes[m]);
                let line = format!(
                    "{} cluster {c}: node {rn}'s link to node {mn} is {}",
                    check::ms(now),
                    if up { "up" } else { "down" }
                );
                self.history.note(line);
                if up && !self.nodes[rn].down && !self.nodes[mn].down {
                    self.full_sync(mn, rn);
                }
            }
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
    /// A cluster member counts as one: it holds the key if one of its masters does (the slot's owner, or
    /// during a migration the node the key moved to), and is excused if one of them is, or if the slot migrated
    /// off a master that had come back without its data since (`Cluster::slot_lost_at`).
    pub fn holding(&mut self, key: &[u8], value: &[u8], since: Time) -> (usize, usize) {
        let now = self.now;
        let (mut holding, mut excused) = (0, 0);
        for m in 0..self.members.len() {
            let mut slot_lost = false;
            let nodes: Vec<usize> = match self.members[m] {
                Member::Node(n) => vec![n],
                Member::Cluster(c) => {
                    let cl = &self.clusters[c];
                    let slot = muxlock::net::cluster::key_slot(key);
                    if cl.slot_lost_at.get(&slot).is_some_and(|&t| t >= since) {
                        slot_lost = true;
                    }
                    let mut at = vec![cl.nodes[cl.owner[slot as usize] as usize]];
                    if let Some((s, _, to)) = cl.migrating.filter(|m| m.0 == slot) {
                        let _ = s;
                        at.push(cl.nodes[to]);
                    }
                    at
                }
            };
            if nodes
                .iter()
                .any(|&n| self.nodes[n].node.holds(key, value, now))
            {
                holding += 1;
            } else if slot_lost
                || nodes.iter().any(|&n| {
                    let n = &self.nodes[n];
                    n.lost_data_at.is_some_and(|t| t >= since) || n.clock_moved_ahead_since(since)
                })
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
    /// runnable clients with the seeded RNG. `None`: all are done (or nothing can ever wake the rest), or a
    /// property is broken already (the history is judged by its first break; a broken liveness rule may leave
    /// the clients nothing to wait for but a fanout asking to be looked at every instant).
    fn pick(&mut self) -> Option<usize> {
        loop {
            if self.history.broken.is_some() {
                return None;
            }
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
    /// Clients may share a process (its fanout, links and clock), as threads share a manager: in one world of
    /// three, two or three per process, whose rounds then meet on one connection per node.
    pub threads: bool,
    /// Directed histories: this many clients to a process (the first ones together), whatever `threads` says.
    pub per_process: Option<usize>,
    /// A hostile network, aimed at the fanout's machine: every process's fanout takes 2–4 requests in flight per
    /// connection (its set-up waits for room too; releases twice that, then held, and detached when their round
    /// ends), drops a connection after 30–300 ms
    /// without a byte while requests wait (`hung_timeout`), its clients three to a process (all, with `threads`
    /// off), and 5–15 % of writes reset their connection. Rounds meet refusals, holds, detaches, reconnects with
    /// their set-up and late replies all the time.
    pub net: bool,
    /// The clients run without the clock check, and in durable worlds without the restart guard too (every
    /// restart keeps every write there: the guard has nothing to guard), so that nothing but the fanout's machine
    /// keeps a reply of the wire from counting for another command; with a hostile network, 1–5 % of writes reset
    /// instead of 5–15 %.
    pub unchecked: bool,
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
    /// Cluster members (`cluster.rs`): the members, some of them simulated clusters, and their nodes.
    pub layout: Option<Rc<cluster::Layout>>,
    /// A calm world: no fault of any kind (no latency spike, reset, pause, restart, flush, partition, slow link,
    /// clock fault, burst, ACL or lack of room; the nodes' links still differ), and clients' pauses cut to
    /// [`CALM_PAUSE`] (`calls.rs` judges what every call must then do).
    pub calm: bool,
}

impl Setup {
    /// A directed history's world: `nodes` durable nodes, `clients` clients each a process of its own, one
    /// horizon, and none of the drawn faults (the history pushes its own events).
    pub fn directed(nodes: usize, clients: usize) -> Setup {
        Setup {
            nodes,
            clients,
            horizon: 1,
            bursts: false,
            durable: true,
            tape: None,
            threads: false,
            per_process: None,
            natives: false,
            clocks: false,
            steps_back: false,
            net: false,
            unchecked: false,
            layout: None,
            calm: false,
        }
    }
}

/// Builds a world for `seed`: nodes with their faults and a plan of pauses, restarts, flushes and snapshots.
/// A directed history's world ([`Setup::directed`]: `nodes` nodes, `clients` clients, no drawn fault), seed 0, with
/// the network options of the default configuration.
/// A directed history's engine: one attempt per call, no restart guard (its nodes are fresh), its connections
/// set up by a lock taken and released; `None` if it cannot be made.
pub async fn warmed_engine(
    nodes: SimNodes,
    clock: SimClock,
) -> Option<muxlock::redlock::sim::Engine<SimNodes, SimClock>> {
    let config = muxlock::Config::default()
        .with_retry_count(0)
        .with_restart_guard(false);
    let engine = muxlock::redlock::sim::Engine::new(nodes, clock, config, [1; 32]).ok()?;
    let ttl = std::time::Duration::from_millis(2_000);
    if let Ok(Some(first)) = engine.try_lock(b"first", ttl).await {
        let _ = engine.unlock(first).await;
    }
    Some(engine)
}

pub fn directed_world(nodes: usize, clients: usize) -> Rc<Sim> {
    let setup = Setup::directed(nodes, clients);
    let options = muxlock::redlock::sim::options(&muxlock::Config::default(), setup.nodes);
    world(0, &setup, &options)
}

pub fn world(seed: u64, setup: &Setup, opts: &NetOptions) -> Rc<Sim> {
    let mut rng = Rng::steered(seed, setup.tape.as_ref());
    // Room from a stream of its own, so that the other choices of a seed stay what they were: in one world of
    // four, each client's fanout takes 2, 4 or 8 requests in flight per connection (releases twice that).
    let mut room = Rng::new(seed ^ 0x726f_6f6d);
    let tight = room.chance(0.25);
    // With cluster members, four times as much: a routed write carries up to seven replies (`TIME`, the command,
    // `TIME`, `WAIT`, `CLUSTER MYID`, `CLUSTER REPLICAS`, `INFO`), more than a room of 2–4 ever takes.
    let scale = match setup.layout {
        Some(_) => 4,
        None => 1,
    };
    // The hostile network's resets and patience for silence, from a stream of their own.
    let mut hostile = Rng::new(seed ^ 0x686f_7374);
    let addrs: Rc<[NodeAddr]> = match &setup.layout {
        Some(layout) => layout.plan().conns().iter().cloned().collect(),
        None => (0..setup.nodes)
            .map(|i| format!("sim-node-{i}:6379").parse().expect("address"))
            .collect(),
    };
    let conns = addrs.len();
    let setup = &Setup {
        nodes: setup.layout.as_ref().map_or(setup.nodes, |l| l.nodes),
        ..setup.clone()
    };
    let base = Instant::now();
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
        };
        let faults = match setup.calm {
            // Half the calm worlds have a slow node (the last): 20 ms each way, well within a round timeout.
            true if i + 1 == setup.nodes && Rng::new(seed ^ 0x736c_6f77).chance(0.5) => Faults {
                latency: (CALM_SLOW, CALM_SLOW),
                spike: (0.0, 0),
                reset: 0.0,
            },
            true => Faults {
                spike: (0.0, 0),
                reset: 0.0,
                ..faults
            },
            false => faults,
        };
        let faults = match setup.net {
            true => Faults {
                // Without the clients' checks, fewer: a connection lives long enough for several rounds to meet on
                // it (a reply counted one place off is one request's reply counted for the next one's).
                reset: match setup.unchecked {
                    true => 0.01 + hostile.range(0, 4) as f64 / 100.0,
                    false => 0.05 + hostile.range(0, 10) as f64 / 100.0,
                },
                ..faults
            },
            false => faults,
        };
        let mut node = Node::new(
            setup.durable || !setup.bursts && rng.chance(0.5),
            rng.next() ^ i as u64,
        );
        if setup.calm {
            // Up for an hour: the restart guard has no window to keep it out for.
            node.started -= 3_600_000 * MS;
        }
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
    // Tasks that share a process (threads sharing a manager), from a stream of their own: in one world of three
    // with `threads`, two or three clients per process.
    let mut threads = Rng::new(seed ^ 0x7468_7265_6164);
    let per_process = match setup.threads && threads.chance(1.0 / 3.0) {
        true => threads.range(2, 3) as usize,
        false => 1,
    };
    let per_process = match (setup.per_process, setup.net) {
        (Some(n), _) => n.max(1),
        (None, true) => 3,
        (None, false) => per_process,
    };
    let opts = &match setup.net {
        true => opts
            .clone()
            .with_max_in_flight(scale * hostile.range(2, 4) as usize)
            .with_hung_timeout(Duration::from_millis(hostile.range(30, 300))),
        false => opts.clone(),
    };
    let clients: Vec<Client> = (0..setup.clients)
        .map(|i| Client {
            process: i / per_process,
            state: State::NotStarted,
            ready: false,
            until: 0,
            sleeping: false,
            pauses: Vec::new(),
            call: None,
            offered: Vec::new(),
        })
        .collect();
    // Within ±0.4 %: two clients differ by less than the 1 % drift factor (drawn per client; a process runs at
    // its first client's).
    let rates: Vec<f64> = (0..setup.clients)
        .map(|_| 1.0 + (rng.range(0, 800) as f64 - 400.0) / 100_000.0)
        .collect();
    let procs: Vec<Proc> = (0..setup.clients.div_ceil(per_process))
        .map(|p| Proc {
            fanout: SimFanout::new(
                &addrs,
                match tight && !setup.net && !setup.calm {
                    true => opts
                        .clone()
                        .with_max_in_flight(scale * [2, 4, 8][room.range(0, 2) as usize]),
                    false => opts.clone(),
                },
                base,
            ),
            lines: (0..conns).map(|_| Line::default()).collect(),
            tick_at: None,
            filed: 0,
            tasks: (0..setup.clients)
                .filter(|&i| i / per_process == p)
                .collect(),
            rate: rates[p * per_process],
            slow: None,
            fixed: vec![None; conns],
            cuts: vec![Vec::new(); conns],
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
        procs,
        addrs,
        base,
        runs: 0,
        tolerance: muxlock::Config::default().clock_tolerance().as_nanos() as Time,
        steps_back: setup.steps_back,
        struck: Struck::default(),
        history: check::History::default(),
        members: match &setup.layout {
            Some(l) => l.kinds.clone(),
            None => (0..setup.nodes).map(Member::Node).collect(),
        },
        clusters: setup
            .layout
            .as_ref()
            .map_or_else(Vec::new, |l| l.clusters.clone()),
        cluster_of: vec![None; setup.nodes],
        maps: Vec::new(),
        map_read_at: BTreeMap::new(),
        opts: Rc::new(opts.clone()),
        layout: setup.layout.clone(),
        calm: setup.calm,
        slow_node: false,
        listening: pushes::Listening::new(seed, setup.clients, pushes::Plan::draw(seed)),
    };
    w.slow_node = (w.nodes.iter()).any(|n| n.faults.latency.0 == CALM_SLOW) && setup.calm;
    for c in 0..w.clusters.len() {
        for (i, &n) in w.clusters[c].nodes.iter().enumerate() {
            w.cluster_of[n] = Some((c, i));
        }
    }
    if setup.layout.is_some() {
        plan_clusters(&mut w, seed, setup);
        let members: Vec<String> = w
            .members
            .iter()
            .map(|m| match *m {
                Member::Node(n) => format!("node {n}"),
                Member::Cluster(c) => format!("cluster {c} (nodes {:?})", w.clusters[c].nodes),
            })
            .collect();
        w.history.note(format!("members: {}", members.join(", ")));
    }
    // The fault plan (none in a calm world).
    for node in (0..setup.nodes).filter(|_| !setup.calm) {
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
            // Drawn per client (a process keeps its first client's).
            let p = w.clients[c].process;
            let first = w.procs[p].tasks[0] == c;
            let node = rng.range(0, setup.nodes as u64 - 1) as usize;
            let slow = Some((node, rng.range(100, 1_500) * MS));
            if first {
                w.procs[p].slow = slow;
            }
            // Partitions of the client's links, now and then: what is in flight is lost (a write-back too).
            let mut t = 0;
            loop {
                t += rng.range(300, 3_000) * MS;
                if t >= setup.horizon {
                    break;
                }
                let node = rng.range(0, setup.nodes as u64 - 1) as usize;
                let until = t + rng.range(20, 1_500) * MS;
                if first {
                    w.procs[p].cuts[node].push((t, until));
                }
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

/// The slots of the resources the cluster worlds lock (`r0`–`r2`), in order.
fn resource_slots() -> Vec<u16> {
    [&b"r0"[..], b"r1", b"r2"]
        .iter()
        .map(|r| muxlock::net::cluster::key_slot(r))
        .collect()
}

/// The cluster events of a world with cluster members, from a stream of their own: per cluster, every 0.4–2.5 s
/// a slot of one of the resources migrates to the other master over 20–800 ms (its keys moved one at a time, 1–4
/// of them before the end), a
/// replica's link goes down for 50–1,500 ms (3 times in 4 with a failover meanwhile, to that replica: without its
/// master's latest writes), or a linked replica takes over.
fn plan_clusters(w: &mut World, seed: u64, setup: &Setup) {
    let mut rng = Rng::new(seed ^ 0x0063_6c75_7374_6572);
    let slots = resource_slots();
    for c in 0..w.clusters.len() {
        let mut t = 0;
        loop {
            t += rng.range(400, 2_500) * MS;
            if t >= setup.horizon {
                break;
            }
            let cl = &w.clusters[c];
            let replicas: Vec<usize> = (0..cl.nodes.len())
                .filter(|&i| cl.replica_of[i].is_some())
                .collect();
            let kind = match replicas.is_empty() {
                true => 0,
                false => rng.range(0, 4),
            };
            match kind {
                0 | 1 => {
                    // To whichever master does not serve the slot then (decided when it starts).
                    let slot = slots[rng.range(0, 2) as usize];
                    let to = rng.range(0, cl.nodes.len() as u64 - 1) as usize;
                    let span = rng.range(20, 800) * MS;
                    w.push(
                        t,
                        Event::Cluster {
                            cluster: c,
                            change: ClusterChange::Migrate { slot, to },
                        },
                    );
                    let moves = rng.range(1, 4);
                    for _ in 0..moves {
                        let at = t + rng.range(0, span);
                        w.push(
                            at,
                            Event::Cluster {
                                cluster: c,
                                change: ClusterChange::MoveKey,
                            },
                        );
                    }
                    w.push(
                        t + span,
                        Event::Cluster {
                            cluster: c,
                            change: ClusterChange::Settle,
                        },
                    );
                }
                2 => {
                    let replica = replicas[rng.range(0, replicas.len() as u64 - 1) as usize];
                    let span = rng.range(50, 1_500) * MS;
                    let link = |up| Event::Cluster {
                        cluster: c,
                        change: ClusterChange::Link { replica, up },
                    };
                    w.push(t, link(false));
                    w.push(t + span, link(true));
                    if rng.chance(0.75) {
                        let at = t + rng.range(0, span);
                        w.push(
                            at,
                            Event::Cluster {
                                cluster: c,
                                change: ClusterChange::Failover {
                                    replica,
                                    unaware: None,
                                },
                            },
                        );
                    }
                }
                3 => {
                    let replica = replicas[rng.range(0, replicas.len() as u64 - 1) as usize];
                    let change = ClusterChange::Failover {
                        replica,
                        unaware: None,
                    };
                    w.push(t, Event::Cluster { cluster: c, change });
                }
                _ => {
                    // The master stalls (a pause of 50–400 ms), its replica takes over meanwhile, and the master
                    // learns of it 0–2 s after it wakes, answering as a master until then.
                    let replica = replicas[rng.range(0, replicas.len() as u64 - 1) as usize];
                    let Some(m) = w.clusters[c].replica_of[replica] else {
                        continue;
                    };
                    let node = w.clusters[c].nodes[m];
                    let span = rng.range(50, 400) * MS;
                    w.push(t, Event::Pause { node, span });
                    let learn = t + span + rng.range(0, 2_000) * MS;
                    let change = ClusterChange::Failover {
                        replica,
                        unaware: Some(learn),
                    };
                    w.push(t + span / 2, Event::Cluster { cluster: c, change });
                }
            }
        }
    }
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

/// The ACL faults of a world, from a stream of their own (the seed's other choices stay what they were): in one
/// world of five, a minority of the nodes refuse (`-NOPERM`) scripts (`EVAL` and `EVALSHA`, or `EVALSHA` alone),
/// `TIME`, `INFO`, the native compare-and-delete or the native probe (`COMMAND`), from the start or from some
/// point on, and now and then the grant comes back later (an operator fixing the user).
pub fn plan_acls(w: &mut World, seed: u64, horizon: Time) {
    let mut rng = Rng::new(seed ^ 0x6163_6c73);
    if !rng.chance(0.2) {
        return;
    }
    let n = w.nodes.len();
    let k = rng.range(1, (n as u64 - 1) / 2) as usize;
    let first = rng.range(0, n as u64 - 1) as usize;
    for j in 0..k {
        let node = (first + j) % n;
        let kinds = [
            Acl::EVAL,
            Acl::EVALSHA,
            Acl::TIME,
            Acl::INFO,
            Acl::NATIVE,
            Acl::COMMAND,
        ];
        let mut denied = kinds[rng.range(0, kinds.len() as u64 - 1) as usize];
        if rng.chance(0.3) {
            denied |= kinds[rng.range(0, kinds.len() as u64 - 1) as usize];
        }
        let from = match rng.chance(0.5) {
            true => 0,
            false => rng.range(0, horizon / MS) * MS,
        };
        w.push(from, Event::Acl { node, denied });
        if rng.chance(0.3) {
            let until = from + rng.range(300, 3_000) * MS;
            w.push(until, Event::Acl { node, denied: 0 });
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
    let addrs = Rc::clone(&sim.world().addrs);
    let mut tasks: Vec<Option<Task>> = (0..sim.clients)
        .map(|me| {
            let nodes = SimNodes {
                sim: Rc::clone(sim),
                me,
                addrs: Rc::clone(&addrs),
                opts: Rc::clone(&sim.world().opts),
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
        // A call that retries for ever ends the run (`judge_call` broke the history at its pause past its count).
        if sim.world().history.broken.is_some() {
            break;
        }
        let polled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task.as_mut().poll(&mut cx)));
        let done = match polled {
            Ok(Poll::Ready(())) => true,
            Ok(Poll::Pending) => {
                let state = sim.world().clients[me].state;
                assert_eq!(state, State::Blocked, "client {me} pending without a wait");
                false
            }
            Err(payload) => {
                // A panic of the library on anything the world sent it is a bug, as two holders are.
                let what = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                let mut w = sim.world();
                let line = format!("client {me} panicked: {what}");
                w.history.note(line.clone());
                w.history.broken.get_or_insert(line);
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
    opts: Rc<NetOptions>,
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
            let mut w = self.sim.world();
            w.clients[self.me].pauses.push(pause);
            w.judge_call(self.me);
            let pause = match w.calm {
                true => pause.min(CALM_PAUSE),
                false => pause,
            };
            let rate = w.procs[w.clients[self.me].process].rate;
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

/// A round of one client: the machine's round, driven on this client's fanout.
#[derive(Debug)]
pub struct SimRound<'a> {
    nodes: &'a SimNodes,
    /// `None` once closed.
    exchange: Option<Exchange>,
    /// The last outcome handed out was a timeout: the caller gives way before the next one (the real fanout's
    /// other threads may read replies meanwhile; a late reply must not be counted for another request of the
    /// round), and until when.
    timed_out: bool,
    gave_way: Option<Time>,
}

/// How long a caller takes between two outcomes after a timeout (see [`SimRound::timed_out`]).
const STEP: Time = 20_000;

impl SimNodes {
    /// This client's members over its fanout, as a manager of `config` builds them (`Members`): plain nodes
    /// pass through it untouched, cluster members are routed by the library's routing.
    pub fn members(self, config: &muxlock::Config) -> Members<SimNodes> {
        let plan = match &self.sim.world().layout {
            Some(layout) => layout.plan(),
            None => Plan::with_maps(
                self.addrs
                    .iter()
                    .map(|a| MemberAddr::Node(a.clone()))
                    .collect(),
                Vec::new(),
            ),
        };
        muxlock::redlock::sim::members(plan, self, config)
    }

    /// A round of this client's (`release`: a release round's).
    fn open(&self, deadline: Instant, release: bool) -> SimRound<'_> {
        let mut w = self.sim.world();
        let p = w.clients[self.me].process;
        let exchange = w.procs[p].fanout.round(deadline, release);
        SimRound {
            nodes: self,
            exchange: Some(exchange),
            timed_out: false,
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
        {
            let w = self.sim.world();
            w.procs[w.clients[self.me].process].fanout.sessions(node)
        }
    }

    fn setup_replies(&self, node: usize) -> Vec<(Value, Instant)> {
        {
            let w = self.sim.world();
            w.procs[w.clients[self.me].process]
                .fanout
                .setup_replies(node)
        }
    }
    fn silent(&self, node: usize, for_at_least: Duration) -> bool {
        let w = self.sim.world();
        w.procs[w.clients[self.me].process]
            .fanout
            .silent(node, for_at_least)
    }
}

impl NodeRound for SimRound<'_> {
    fn send_to(&mut self, nodes: NodeSet, request: &[u8], replies: usize) -> NodeSet {
        let me = self.nodes.me;
        let mut w = self.nodes.sim.world();
        let Some(exchange) = self.exchange.as_mut() else {
            return NodeSet::EMPTY;
        };
        let at = w.instant(me, w.now);
        let p = w.clients[me].process;
        let sent = w.procs[p]
            .fanout
            .send(exchange, nodes, (request, replies), at);
        w.note_offers(me, sent, request);
        w.pump(p);
        sent
    }

    fn send(&mut self, node: usize, request: &[u8], replies: usize) -> NodeSet {
        let mut only = NodeSet::EMPTY;
        only.insert(node);
        NodeRound::send_to(self, only, request, replies)
    }

    fn need(&mut self, _outcomes: usize) {}

    fn next_seq(&self, node: usize) -> u32 {
        let mut w = self.nodes.sim.world();
        match self.exchange.as_ref() {
            Some(exchange) => {
                let p = w.clients[self.nodes.me].process;
                w.procs[p].fanout.next_seq(exchange, node)
            }
            None => 0,
        }
    }

    fn patient_until(&mut self, hard: Instant) {
        let me = self.nodes.me;
        let mut w = self.nodes.sim.world();
        let at = w.instant(me, w.now);
        if let Some(exchange) = self.exchange.as_mut() {
            let p = w.clients[me].process;
            w.procs[p].fanout.patient_until(exchange, hard, at);
        }
    }

    fn cut_short(&mut self, at: Instant) {
        let me = self.nodes.me;
        let mut w = self.nodes.sim.world();
        if let Some(exchange) = self.exchange.as_mut() {
            let p = w.clients[me].process;
            w.procs[p].fanout.cut_short(exchange, at);
        }
    }

    fn next(&mut self) -> impl Future<Output = Option<(CommandId, Reply)>> {
        poll_fn(move |_| self.poll_next())
    }
}

impl SimRound<'_> {
    /// The next outcome if one is filed (or `None` once the round is settled); else `Pending`, this client
    /// waiting until something is read for it or until the instant the machine names.
    fn poll_next(&mut self) -> Poll<Option<(CommandId, Reply)>> {
        let me = self.nodes.me;
        let mut w = self.nodes.sim.world();
        if self.timed_out && self.gave_way.is_none_or(|t| w.now < t) {
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
        let Some(exchange) = self.exchange.as_mut() else {
            return Poll::Ready(None);
        };
        let at = w.instant(me, w.now);
        let p = w.clients[me].process;
        let step = w.procs[p].fanout.poll(exchange, at);
        w.pump(p);
        match step {
            Step::Outcome(id, reply) => {
                self.timed_out = matches!(reply, Err(NodeError::Timeout));
                match &reply {
                    Err(NodeError::Timeout) => w.struck.timeouts += 1,
                    Err(NodeError::Overloaded) => w.struck.overloaded += 1,
                    _ => {}
                }
                Poll::Ready(Some((id, reply)))
            }
            Step::Done => Poll::Ready(None),
            Step::Wait(until) => {
                let until = w.time(me, until).max(w.now + 1);
                w.wait(me, until, true);
                Poll::Pending
            }
        }
    }
}

impl Drop for SimRound<'_> {
    fn drop(&mut self) {
        let me = self.nodes.me;
        let mut w = self.nodes.sim.world();
        if let Some(exchange) = self.exchange.take() {
            let at = w.instant(me, w.now);
            let p = w.clients[me].process;
            w.procs[p].fanout.close(exchange, at);
            w.pump(p);
        }
    }
}

/// The routing's connections ([`Conns`]): a client's fanout, as the members of a manager run over it
/// (`muxlock::net::cluster::Members`). The same rounds as [`Nodes`]; the time is the client's; a map read is
/// answered after a few milliseconds from the cluster's state then ([`Event::Map`]).
impl Conns for SimNodes {
    type Round<'a> = SimRound<'a>;

    fn round(&self, deadline: Instant) -> SimRound<'_> {
        self.open(deadline, false)
    }

    fn release_round(&self, deadline: Instant) -> SimRound<'_> {
        self.open(deadline, true)
    }

    fn options(&self) -> &NetOptions {
        &self.opts
    }

    fn stats(&self, conn: usize) -> NodeCounts {
        let w = self.sim.world();
        w.procs[w.clients[self.me].process].fanout.counts(conn)
    }

    fn sessions(&self, conn: usize) -> u64 {
        Nodes::sessions(self, conn)
    }

    fn next_session(&self, conn: usize) -> u64 {
        let w = self.sim.world();
        w.procs[w.clients[self.me].process]
            .fanout
            .next_session(conn)
    }

    fn setup_replies(&self, conn: usize) -> Vec<(Value, Instant)> {
        Nodes::setup_replies(self, conn)
    }

    fn silent(&self, conn: usize, for_at_least: Duration) -> bool {
        Nodes::silent(self, conn, for_at_least)
    }

    fn now(&self) -> Instant {
        let w = self.sim.world();
        w.instant(self.me, w.now)
    }

    fn read_map(
        &self,
        nodes: Vec<NodeAddr>,
        _wait: Duration,
        _tls: &TlsConfig,
        done: MapDone,
    ) -> Result<(), ()> {
        let mut w = self.sim.world();
        let cluster = nodes.iter().find_map(|a| {
            let i = w.addrs.iter().position(|b| b.host() == a.host())?;
            w.cluster_of.get(i).copied().flatten().map(|(c, _)| c)
        });
        let Some(cluster) = cluster else {
            return Err(());
        };
        // A member's map reads start at least the routing's `MIN_REFRESH` (100 ms) apart, however many rounds
        // meet `MOVED` or a lost connection meanwhile: a storm of redirections must not become one of map reads
        // (each asks every node of the cluster).
        let at = w.instant(self.me, w.now);
        w.struck.map_reads += 1;
        if let Some(last) = w.map_read_at.insert((self.me, cluster), at) {
            let apart = at.saturating_duration_since(last);
            if apart < MIN_REFRESH {
                let line = format!(
                    "c{}'s map reads of cluster {cluster} {apart:?} apart, under {MIN_REFRESH:?}",
                    self.me
                );
                w.history.breaks(line);
            }
        }
        let process = w.clients[self.me].process;
        w.maps.push(MapWait(Some(done)));
        let done = w.maps.len() - 1;
        let at = w.now + w.rng.range(MS, 5 * MS);
        w.push(
            at,
            Event::Map {
                client: process,
                cluster,
                done,
            },
        );
        Ok(())
    }

    /// A simulated cluster keeps its nodes: a map never names one the first did not.
    fn vacancies(&self) -> Box<dyn Vacancies> {
        Box::new(NoVacancies)
    }
}

/// The vacant connections of a simulated cluster's member: never needed (see [`SimNodes::vacancies`]).
struct NoVacancies;

impl Vacancies for NoVacancies {
    fn occupy(&self, _conn: usize, _addr: NodeAddr) -> bool {
        false
    }

    fn addr(&self, _conn: usize) -> Option<NodeAddr> {
        None
    }
}

impl ConnRound for SimRound<'_> {
    fn deadline(&self) -> Instant {
        self.exchange
            .as_ref()
            .map_or_else(|| Conns::now(self.nodes), Exchange::deadline)
    }

    fn patient_until(&mut self, hard: Instant) {
        NodeRound::patient_until(self, hard)
    }

    fn cut_short(&mut self, at: Instant) {
        NodeRound::cut_short(self, at)
    }

    fn send(&mut self, conn: usize, request: &[u8], replies: usize) -> NodeSet {
        NodeRound::send(self, conn, request, replies)
    }

    fn send_to(&mut self, conns: NodeSet, request: &[u8], replies: usize) -> NodeSet {
        NodeRound::send_to(self, conns, request, replies)
    }

    fn send_each(&mut self, requests: &[(usize, &[u8], usize)]) -> NodeSet {
        let me = self.nodes.me;
        let mut w = self.nodes.sim.world();
        let Some(exchange) = self.exchange.as_mut() else {
            return NodeSet::EMPTY;
        };
        let at = w.instant(me, w.now);
        let p = w.clients[me].process;
        let sent = w.procs[p].fanout.send_each(exchange, requests, at);
        for &(conn, request, _) in requests {
            let mut only = NodeSet::EMPTY;
            only.insert(conn);
            if sent.contains(conn) {
                w.note_offers(me, only, request);
            }
        }
        w.pump(p);
        sent
    }

    fn need(&mut self, _outcomes: usize) {}

    fn next_seq(&self, conn: usize) -> u32 {
        NodeRound::next_seq(self, conn)
    }

    /// Never called: the simulator's clients are tasks, and poll.
    fn next(&mut self) -> Option<(CommandId, Reply)> {
        unreachable!("a simulated round is polled, never blocked on")
    }

    fn poll_next(&mut self, _cx: &mut Context<'_>) -> Poll<Option<(CommandId, Reply)>> {
        SimRound::poll_next(self)
    }
}
