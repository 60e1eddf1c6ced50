//! The restart-aware quorum: the spec's "delayed restart", done by the client.
//!
//! The Redlock page (*Performance, crash recovery and fsync*): a node that restarts without its data (no
//! `appendfsync always`) may forget a lock it granted, and a second client could then gather a majority while the
//! first still holds the lock. The cure it proposes is to keep a restarted node unavailable for more than the
//! longest TTL in use, so that every lock it forgot has expired anyway.
//!
//! muxlock cannot delay the server's start, so it delays *trusting* it. On every new connection it pipelines
//! `INFO server` (then `persist.rs`'s two readings) and reads the node's `run_id` and `uptime_in_seconds`; a node that started less than the window
//! ago (the largest TTL this manager has used, or a configured window if larger, plus the drift allowance), or
//! whose `run_id` changed since the last connection, keeps answering but its "yes" votes are not counted until the
//! window has passed.
//!
//! # Nodes that can prove they forget nothing are trusted at once
//!
//! The guard exists because a restarted node may have forgotten the keys it granted. A node trusted at once must
//! show, on the connection its vote comes on, two things (both read by `persist.rs`'s set-up commands):
//!
//! 1. **It loses no acknowledged write on a crash**: `appendonly yes`, `appendfsync always` and
//!    `no-appendfsync-on-rewrite no`. Redis then appends each write to its append-only file and `fsync`s it
//!    before the reply goes out (in `beforeSleep`, the AOF is flushed and synced before pending replies are
//!    written), and a write or `fsync` error under `always` makes the server exit rather than answer.
//!    `no-appendfsync-on-rewrite yes` would skip that `fsync` while a `BGSAVE` or rewrite runs. On restart the
//!    node reloads the file before it serves anyone (`-LOADING` meanwhile), and an expiry is logged as an absolute
//!    Unix time (`PEXPIREAT`/`PXAT`; a script's effects are logged, so an extension's `PEXPIRE` is too).
//! 2. **It has not lost its data set since any lock that may still be live was granted**: its persistence marker
//!    ([`PERSIST_MARKER_KEY`](crate::redlock::PERSIST_MARKER_KEY), written once with `SET NX` and no expiry) is older
//!    than the window. Settings alone prove nothing about the *files*: an ephemeral disk, a pod rescheduled
//!    without its volume, a deleted `appendonlydir` bring a node back empty with the same settings. Every lock
//!    still live now was granted less than the window ago, so after the marker was written; a node that still
//!    has the marker has lost no file since then, and with (1) no acknowledged write either. A node that lost its
//!    files lost the marker too: the first connection after writes a new one, young, and the window rule applies
//!    — to every client, including one that never saw the node before (it reads the marker's age, not a
//!    remembered `run_id`).
//!
//!    Why its *age*, and not merely "written before this process started": a node that loses its files
//!    (process P2, which writes a new marker) and restarts again soon with its files (P3) holds a marker older
//!    than P3 but younger than the locks P2's predecessor forgot. Measured against the window, the marker covers
//!    exactly the leases that can still be live.
//!
//! A node that passes neither gets the window rule below, as does one whose `CONFIG` or marker script is
//! refused (the refusal is kept as the reply, not counted as a failure of the connection). Where this manager saw
//! the node's previous process (a changed `run_id` on a later connection), that one must have qualified on its
//! settings too; and a process once found not to qualify on its settings is not trusted at once later in its life
//! (a reading of `always` after `CONFIG SET appendfsync always` does not cover the writes before it).
//!
//! What it relies on, and its limits:
//!
//! - **A brand-new node looks like one that lost its files**: it is not trusted at once until its marker is a
//!   window old (or its process is: the window rule). An operator who provisions a new, empty node may write
//!   the marker with an old time first (`SET muxlock:persist-marker "0 provisioned" NX`), as `muxlock cluster up`
//!   does; writing it on a node that may have lost data defeats the guard.
//! - **The marker's age is read on the node's wall clock**, as the uptime is (see below): the time written and
//!   the time read are both `TIME`. A clock that steps forward between them, or a data directory moved to a
//!   machine whose clock runs ahead by more than the drift allowance, makes the marker look older than it is.
//! - **A data set restored from an older backup** (or an old RDB file loaded instead of a lost AOF) holds the
//!   marker but not the locks granted since the backup: restoring one is a restart without data, and needs the
//!   window (delete the marker with it).
//! - **Settings changed at run time.** Both readings are taken once per connection: a process switched to
//!   `appendfsync everysec` (or `no-appendfsync-on-rewrite yes`) by `CONFIG SET` at run time and restarted from
//!   its configuration file reads `always` again, and its crash may have lost the last second of writes. No
//!   client can see that: a client that connects after the restart never met the old process, and re-reading on
//!   a live connection would only narrow the gap (the change and the crash may fall between two readings). So
//!   the rule is: change persistence settings in the configuration file and restart (or `CONFIG REWRITE`, so
//!   the next process reads the same), never at run time alone. Likewise **persistence turned on at run time**
//!   (`CONFIG SET appendonly yes`) reads `yes` while the first rewrite is still writing the file.
//! - **The marker is reserved**: a client that writes `muxlock:persist-marker` itself, or a `FLUSHALL` on a live
//!   node (which deletes the marker and every lock without a restart, invisible to `run_id` and uptime alike),
//!   are outside what the guard can see.
//! - **Permissions**: the marker script needs `+eval`, `+time`, `+info`, and `+set`/`+get` on
//!   `~muxlock:persist-marker`; the settings need `+config|get`. Without them the node gets the window rule.
//! - **What it costs the nodes.** `appendfsync always` puts an `fsync` in every write's path: see
//!   `benchmarks/results/2026-11-22-appendfsync-always.md` for measured figures. The marker is one small script
//!   per connection.
//!
//! # Extensions
//!
//! An extension (or a guard's renewal) is a compare-and-pexpire: its "yes" says that the key holds our value on that
//! node now. That is *not* proof that we still hold the lock there: a node restored from an older snapshot (Redis'
//! default RDB persistence, or a backup) may hold our value from before the restart while it lost the key of the
//! holder who came after us (A releases, B acquires, two nodes restart from a snapshot that has A's key: A's
//! extension would then "succeed" while B holds the lock). So an extension's "yes" counts from a node only if
//!
//! - the window rule trusts the node (as for acquisitions: trusted at once, or up longer than the window), or
//! - the node's process has been up since **before the lock was acquired** (`uptime` ≥ the time since the acquisition
//!   round started, with uptime's lower bound): it has not restarted since our `SET`, so the value it holds is the
//!   one we set, and every key a rival set after ours is still there with it. This is what lets `extend` with a lease
//!   longer than the nodes' uptime succeed on nodes that were up when the lock was taken (`muxlock extend --ttl 60s`
//!   on nodes up 57 s, which the window rule alone refuses).
//!
//! An extension *by value* ([`LockManager::extend_value`](crate::redlock::LockManager::extend_value), `muxlock extend`)
//! does not know when the lock was acquired, so only the window rule applies to it. An extension notes its TTL
//! before its requests are sent, as an acquisition does, so that this manager's window grows with the longest
//! lease it granted or extended; other clients of the same nodes do not see it, and their
//! [`Config::restart_window`](crate::redlock::Config::restart_window) must cover the longest lease *or extension* any
//! client uses.

//! # Which way each figure may err, and why the guard is still safe
//!
//! The guard needs a *lower* bound on how long the node's process has been up. Every figure it uses may err, and
//! each is taken so that the error makes the node look younger, never older:
//!
//! - **`uptime_in_seconds` is truncated twice.** Redis computes it as `unixtime - stat_starttime`, two wall-clock
//!   times in *whole* seconds (the start as `time(NULL)`, the present as its cached clock). A server that started at
//!   12.98 s and answers at 13.01 s reports 1 after 30 ms. From `floor(t) - floor(s) = u` follows only
//!   `t - s > u - 1`: the guard takes `u - 1` seconds (0 for a reading of 0 or 1). Taking `u` itself would trust a
//!   node up to a whole second too early: after a majority restarted just before a second ended, a contender could
//!   get the lock up to a second before the holder's lease ended.
//! - **Redis' cached clock lags.** `unixtime` is refreshed by the event loop, so it may be older than the moment
//!   the reply is built: that makes `u` smaller, the safe way.
//! - **The moment the reading is true.** The lower bound holds at the instant the server built the reply; the
//!   guard dates it at the instant the reply was *decoded* on this side (recorded by the connection with the
//!   reply), which is later. A later date makes the start look later: safe. (Dating it at the request's send
//!   would not be: the server may build the reply after that.)
//! - **Time since then is measured on `Instant`**, the monotonic clock, and compared as a duration: no instant is
//!   computed by subtracting an uptime, which could not be represented on a client that booted after the node (a
//!   client that cannot represent the start would have to guess, and a guess of "long ago" trusts the node at once,
//!   whatever the window).
//! - **A changed `run_id`** means another server process answers at this address (a restart, a failover to a
//!   replica that may lack recent writes): its uptime says nothing about when it took over, so the window counts
//!   from the decoding of the new connection's `INFO`, by which time the takeover had happened.
//! - **No readable uptime** (a field missing, a negative value after the node's wall clock stepped back): the
//!   node is treated as started when the reply was read.
//! - **The window** is the longest lease in use, in milliseconds rounded up (as sent in `PX`), plus the drift
//!   allowance (`ttl × drift_factor + 2 ms`). The allowance covers a node whose clock runs slower than ours (its
//!   forgotten keys would have lived longer in real time) and Redis' millisecond expiry granularity.
//!
//! # Failovers in a cluster member
//!
//! A Redlock member may be a whole Redis Cluster; its vote for a lock comes from the master that owns the lock's
//! slot, and the guard judges *that* connection (its `INFO`, settings and marker, as a plain node's), not the
//! member's first. Two more cases:
//!
//! - **A replica promoted to master** (a failover: the routing layer sees a `MOVED` to a node its map showed as a
//!   replica, or a node it never saw serve; or every master of a member's first map, when the map could not be read
//!   at build and the connections' `INFO` may predate a promotion) is treated as a restart at the instant the routing
//!   layer saw it take over: its "yes" does not count for the window after that, and an extension's "up since the
//!   acquisition" counts from that instant too. Replication is asynchronous: the replica may lack a grant its master
//!   had acknowledged, which is exactly the spec's restart without persistence. Unlike a restarted node, **no
//!   persistence proof lets it count sooner**: `appendfsync always` on the replica makes *its own* writes durable,
//!   not the ones its master acknowledged before they were replicated, and the persistence marker was replicated from
//!   the old master, so it is old. (Letting "`appendfsync always` and the marker" count at once would trust exactly
//!   the replica that lost the grant.) This manager's own grants on cluster nodes wait for the shard's replicas
//!   (`WAIT`, in the routing layer's replication check), so the replica that takes over has them; the window stays,
//!   for grants other clients made without it (another manager with the guard off, another client library).
//! - **A slot migrated between masters** (a `MOVED` to a node that was already a master of the map, an `ASK` to the
//!   importing one, a map that gives the slot another master) is a restart *of that slot* on the new owner, from the
//!   instant the routing layer saw it: its "yes" on keys of that slot does not count for the window after that
//!   (its other slots count as before). `MIGRATE` moves each key with its expiry, and the source answers `ASK`
//!   only for a key it no longer holds, so one node at a time serves each key; but the new owner holds only what
//!   the old one still had. An old owner that came back without its data (its own votes quarantined) and then
//!   had the slot migrated off it, whole or half-way, hands over a slot without the grants it forgot, and the
//!   new owner, up for long, would grant them again at once. The guard cannot tell such a migration from a
//!   routine one (the old owner may be gone from view), so every migration seen waits the window: for keys of
//!   a slot being moved, a member votes no for one window (`tests/cluster/slot_migration.rs`).
//!
//! - **The persistence marker proves nothing on a cluster member's node**: it lives in one slot, and a migration may
//!   move that slot, marker and all, to a master that lost its files. So a cluster member's node is never trusted at
//!   once; after a restart it gets the window rule, whatever its settings (`Nodes::in_cluster`).
//!
//! - **A failover it never sees a `MOVED` or a new map for** (a failover and a failback of a shard this manager sent
//!   nothing to meanwhile: the same master on the same connection, without the grants its replica took) is seen by
//!   the routing layer's replication check: every vote of a cluster node is handed up only after an `INFO
//!   replication` read after it shows the master id the connection's set-up read; another id quarantines the node as
//!   promoted before the vote is judged here (`net/cluster/route/replid.rs`). The same check waits for the shard's
//!   replicas (`WAIT`): a grant counts only once every replica the map shows (and every one the master shows online)
//!   has it, so a master deposed while it stalled, answering before it learns it, cannot make a grant that the
//!   replica that took over lacks count.
//!
//! What it does not see: a failover or a migration that happened before this manager read the member's map (the
//! promoted master, or the slot's new owner, looks like any master; after a window from either no lost grant can
//! still be live, so this matters only for a manager started within a window of one; a master whose
//! connection's `INFO` shows it was ever promoted, `second_repl_offset` set, waits a window from that reading;
//! nothing on a node shows that a slot came to it lately).
//!
//! # A broken monotonic clock
//!
//! The same `INFO server` reading says which monotonic clock the server process runs its timers on
//! (`monotonic_clock`, Redis and Valkey since 6.2): `POSIX clock_gettime`, or a processor counter and the rate
//! it was calibrated at (`X86 TSC @ 2444.95 ticks/us`, `ARM CNTVCT @ 24 ticks/us`). A calibration that went
//! wrong (valkey-io/valkey#4345, Valkey 9.1.0: `X86 TSC @ inf ticks/us`) leaves a clock that stands still or
//! crawls: `serverCron` and every timer stop or crawl with it, and the issue reports keys that never expire.
//! Such a node may hold a lock forever (a liveness hazard), and what its keys mean once the process is
//! restarted or its clock moves again is anyone's guess (a safety one). (Made to crawl here, by calibrating
//! Valkey 9.1.2 against a slowed `CLOCK_MONOTONIC`, `tests/mutex/clocks.rs`, a 1 s key still expired when
//! touched: the standstill of the issue, which 9.1.2 no longer calibrates to, was not reproduced.) So a node
//! whose reading shows a broken rate does not count: every
//! vote it gives for us is [`NodeError::Clock`](crate::net::NodeError::Clock), with the `INFO` line in the
//! report (a vote against is kept: the key is there), for as long as the process runs (the rate is fixed at
//! its start; a restart is a new connection, and a new reading). [`Stats`](crate::redlock::Stats) says it per
//! node. Broken means: a counter rate that is not a finite number from 1 to 100,000 ticks a microsecond (1 MHz,
//! the slowest counter Redis uses, to 100 GHz, beyond any processor's); `POSIX clock_gettime`, a missing line
//! and any other text without a rate are not. The reading rides on the restart guard's `INFO`: with the guard
//! off it is not made (the clock check's `TIME`s still see a clock that stands still, once it is more than the
//! tolerance behind).
//!
//! # What the guard cannot see
//!
//! - **A node whose wall clock steps forward** right after it started reports a larger uptime: Redis' uptime is
//!   wall-clock based and the client has no other view of the node's start. (The marker's age has the same
//!   dependence; see above.)
//! - **Leases longer than this manager has used**, taken by other clients of the same nodes: set
//!   [`Config::restart_window`](crate::redlock::Config::restart_window) to the longest TTL any client uses.
//! - **A proxy that reconnects to another backend behind one client connection**: the client sees no new
//!   connection, so no new `INFO`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::redlock::config::Config;
use crate::redlock::engine::clock::Seen;
use crate::redlock::engine::native::{self, Natives};
use crate::redlock::engine::persist;
use crate::redlock::engine::seam::Nodes;
use crate::redlock::quorum::drift;
use crate::resp::{Value, encode_command};
use crate::sync::lock;
#[cfg(test)]
use info::parse_info;
use info::{broken_monotonic, reading, was_promoted};

/// A lower bound on a server process's age: it had been up at least `least` at instant `at` (our clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Age {
    at: Instant,
    least: Duration,
}

impl Age {
    /// How long the process has been up at least, at `now`.
    fn at(self, now: Instant) -> Duration {
        now.saturating_duration_since(self.at)
            .saturating_add(self.least)
    }
}

/// What is known of one node's current server process.
#[derive(Debug, Default)]
struct Node {
    /// The connection (fanout session) this was read on.
    session: u64,
    run_id: Option<Bytes>,
    /// How old the process is at least; `None` before the first reading.
    age: Option<Age>,
    /// The last reading of this process's settings said it loses no acknowledged write (see `persist.rs`).
    persists: bool,
    /// The settings qualify: this process's, and its predecessor's as far as this manager saw, and since this
    /// manager first read this process (see the module docs).
    settings_qualify: bool,
    /// How old the node's persistence marker is at least, from the last connection's reading; `None` if refused.
    marker: Option<Age>,
    /// The last reading says this process was promoted from a replica (`second_repl_offset` set): no proof lets
    /// it count before the window (see "Failovers in a cluster member").
    promoted: bool,
    /// The last reading says this process's monotonic clock is broken: why (see "A broken monotonic clock").
    broken_clock: Option<String>,
}

/// What a [`Node::read`] made of a connection's set-up replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Read {
    /// Nothing new: the same connection as last time.
    Same,
    /// A new connection was read; `restarted` if another process answers on it than on the one before.
    New { restarted: bool },
    /// A new connection whose set-up replies are not all there (being read, or the connection dropped and the
    /// next one is being set up): nothing was changed, and the node is not trusted until they are.
    Incomplete,
}

impl Node {
    /// Reads connection `session`'s set-up replies (`INFO server`, the settings and the marker, where `ids`
    /// says), if that is a connection this node was not read on yet. Only a whole reading changes what is
    /// known: a connection that dropped right after its set-up (its replies already cleared for the next one)
    /// must not wipe the `run_id`, or the next process would not be seen as another one.
    fn read(&mut self, session: u64, replies: &[(Value, Instant)], ids: SetupIds) -> Read {
        if self.session == session {
            return Read::Same;
        }
        let (Some((info, read_at)), Some((settings, _)), Some((marker, marker_at))) = (
            replies.get(ids.info),
            replies.get(ids.settings),
            replies.get(ids.marker),
        ) else {
            return Read::Incomplete;
        };
        let (run_id, mut age) = reading(info, *read_at, self.run_id.as_ref());
        // A master promoted from a replica at some time unknown: its window starts now, as a restart's does.
        self.promoted = was_promoted(info);
        self.broken_clock = broken_monotonic(info);
        if self.promoted {
            age.least = Duration::ZERO;
        }
        let persists = persist::settings_persist(settings);
        let restarted = matches!((&self.run_id, &run_id), (Some(old), Some(new)) if old != new);
        self.settings_qualify = settings_qualify(
            self.age.is_some(),
            restarted,
            (self.persists, self.settings_qualify),
            persists,
        );
        self.persists = persists;
        // An `INFO` without a `run_id` (not a Redis we know) tells nothing of which process answers: keep the last.
        if run_id.is_some() {
            self.run_id = run_id;
        }
        self.age = Some(age);
        // Dated when the reply was decoded, later than when the script read the node's clock: the safe way.
        self.marker = persist::marker_age(marker).map(|least| Age {
            at: *marker_at,
            least,
        });
        self.session = session;
        Read::New { restarted }
    }

    /// Trusted at once at `now`: the settings qualify and the marker is older than `window`. `marker`: whether
    /// the marker may prove anything here (not on a cluster member's node: see "Failovers in a cluster member").
    fn trusted_at_once(&self, now: Instant, window: Duration, marker: bool) -> bool {
        marker
            && !self.promoted
            && self.settings_qualify
            && self.marker.is_some_and(|m| m.at(now) >= window)
    }

    /// Whether the node's votes count at `now`: trusted at once, or up longer than `window`.
    fn counts(&self, now: Instant, window: Duration, marker: bool) -> bool {
        self.trusted_at_once(now, window, marker)
            || self.age.is_some_and(|age| age.at(now) >= window)
    }

    /// How long until the node counts, if it does not yet (`None` before the first reading).
    fn counted_in(&self, now: Instant, window: Duration, marker: bool) -> Option<Duration> {
        if self.counts(now, window, marker) {
            return None;
        }
        let by_age = window.saturating_sub(self.age?.at(now));
        let by_marker = self
            .marker
            .filter(|_| marker && self.settings_qualify)
            .map_or(by_age, |m| window.saturating_sub(m.at(now)));
        Some(by_age.min(by_marker)).filter(|d| !d.is_zero())
    }
}

/// What the guard knows of one node, for [`Stats`](crate::redlock::Stats) and for errors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Standing {
    /// Trusted at once (it persists every write and its marker is older than the window); `false` before the
    /// first reading.
    pub(crate) trusted_at_once: bool,
    /// How long the process has been up at least, if read.
    pub(crate) up: Option<Duration>,
    /// How long until its grants count, if they do not yet.
    pub(crate) counted_in: Option<Duration>,
    /// Its `INFO` says its monotonic clock is broken: its grants do not count while its process runs.
    pub(crate) broken_clock: bool,
}

impl Standing {
    /// A cluster member's standing from its connections': trusted at once if every connection read so far is
    /// (and one was); counted once the last of them counts; up as long as the youngest read.
    pub(crate) fn of_member(each: impl IntoIterator<Item = Standing>) -> Standing {
        let read: Vec<Standing> = each
            .into_iter()
            .filter(|s| *s != Standing::default())
            .collect();
        Standing {
            trusted_at_once: !read.is_empty() && read.iter().all(|s| s.trusted_at_once),
            up: read.iter().filter_map(|s| s.up).min(),
            counted_in: read.iter().filter_map(|s| s.counted_in).max(),
            broken_clock: read.iter().any(|s| s.broken_clock),
        }
    }
}

/// Tracks restarts per node and the window in force.
#[derive(Debug)]
pub(crate) struct RestartGuard {
    nodes: Vec<Mutex<Node>>,
    /// Per node: connections that found another server process than the one before.
    restarts: Vec<AtomicU64>,
    /// The largest lease used so far, in milliseconds.
    max_ttl_ms: AtomicU64,
    configured: Duration,
    drift_factor: f64,
}

/// Where the guard's three readings are among a connection's set-up replies: typed, so that no reader counts
/// positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SetupIds {
    /// `INFO server`: `run_id` and uptime.
    info: usize,
    /// `CONFIG GET *append*`: the persistence settings (may be refused).
    settings: usize,
    /// The persistence marker script (may be refused).
    marker: usize,
}

impl SetupIds {
    /// The readings that may be refused (an error reply is then their reply, and the node gets the window
    /// rule): the settings and the marker, for `Options::optional_setup`.
    pub(crate) fn optional(self) -> Vec<usize> {
        vec![self.settings, self.marker]
    }
    /// Where `INFO` is among the set-up replies (with the replication section on a cluster member's nodes: the
    /// routing layer's replication check compares with it).
    pub(crate) fn info(self) -> usize {
        self.info
    }
}

/// What the engine reads from each connection's set-up replies: the restart guard's readings (when it is on) and
/// the native commands' probe (`native.rs`). The engine keeps it in its `restart` field.
#[derive(Debug)]
pub(crate) struct Setup {
    /// The restart-aware quorum, when on, and where its readings are among the set-up replies.
    pub(crate) guard: Option<(RestartGuard, SetupIds)>,
    /// Each node's native compare-and-delete, from the probe on its current connection.
    pub(crate) natives: Natives,
    /// The set-up steps whose refusal is kept as their reply (`Options::optional_setup`).
    optional: Vec<usize>,
    /// What the clock check remembers of each member between rounds (`clock.rs`, "A clock seen ahead"): kept
    /// here, beside the other per-node knowledge every engine is built with.
    pub(crate) clocks: Seen,
}

impl Setup {
    /// The set-up steps that may be refused, for `Options::optional_setup`: the scripts' `SCRIPT LOAD`s (a user
    /// without `+script|load`, or without Lua at all, still locks: `NOSCRIPT` sends a script in full, and nodes
    /// with native commands need none), the native probe, and the restart guard's settings and marker.
    pub(crate) fn optional(&self) -> Vec<usize> {
        self.optional.clone()
    }
}

/// The commands pipelined on every new connection (the scripts' `SCRIPT LOAD`s, the native probe, then the
/// restart guard's readings if `config` turns it on), and what reads their replies.
#[cfg_attr(not(feature = "sim"), allow(dead_code))] // the simulator's engine; a manager uses `_for`
pub(crate) fn connection_setup(config: &Config, n: usize) -> (Vec<Bytes>, Setup) {
    connection_setup_for(config, n, n, false)
}

/// [`connection_setup`] for `n` members over `conns` connections (a cluster member has one per node): the native
/// commands are read per member (from its own connection), the restart guard per connection (a vote is judged by
/// the connection it came on). With `cluster` members, `INFO` also reads the replication section: a master that
/// was promoted from a replica says so (see "Failovers in a cluster member").
pub(crate) fn connection_setup_for(
    config: &Config,
    n: usize,
    conns: usize,
    cluster: bool,
) -> (Vec<Bytes>, Setup) {
    let mut setup = crate::redlock::scripts::setup_commands();
    let mut optional: Vec<usize> = (0..setup.len()).collect();
    setup.push(native::probe_command());
    let natives = Natives::new(n, setup.len() - 1);
    optional.push(setup.len() - 1);
    let guard = config.restart_guard.then(|| {
        let ids = add_setup_commands_for(&mut setup, cluster);
        optional.extend(ids.optional());
        let guard = RestartGuard::new(conns, config.restart_window, config.drift_factor);
        (guard, ids)
    });
    (
        setup,
        Setup {
            guard,
            natives,
            optional,
            // Per connection: a cluster member's nodes each have a clock of their own.
            clocks: Seen::new(conns, config),
        },
    )
}

/// Appends `INFO server`, `CONFIG GET *append*` and the marker script to the set-up commands pipelined on every
/// new connection, and says where each one's reply will be.
/// With `INFO server replication` for cluster members (Redis >= 7.0 reads several
/// sections at once).
pub(crate) fn add_setup_commands_for(setup: &mut Vec<Bytes>, cluster: bool) -> SetupIds {
    let mut push = |command: Bytes| {
        setup.push(command);
        setup.len() - 1
    };
    let mut info = BytesMut::new();
    match cluster {
        true => encode_command(&[b"INFO", b"server", b"replication"], &mut info),
        false => encode_command(&[b"INFO", b"server"], &mut info),
    }
    let [config, marker] = persist::setup_commands();
    SetupIds {
        info: push(info.freeze()),
        settings: push(config),
        marker: push(marker),
    }
}

impl RestartGuard {
    pub(crate) fn new(n: usize, configured: Duration, drift_factor: f64) -> RestartGuard {
        RestartGuard {
            nodes: (0..n).map(|_| Mutex::new(Node::default())).collect(),
            restarts: (0..n).map(|_| AtomicU64::new(0)).collect(),
            max_ttl_ms: AtomicU64::new(0),
            configured,
            drift_factor,
        }
    }

    /// Records that a lease of `ttl` is in use (before its requests are sent).
    pub(crate) fn note_ttl(&self, ttl_ms: u64) {
        self.max_ttl_ms.fetch_max(ttl_ms, Ordering::Relaxed);
    }

    /// How long after a restart a node's votes are not counted: more than the longest lease in use.
    pub(crate) fn window(&self) -> Duration {
        let ttl =
            Duration::from_millis(self.max_ttl_ms.load(Ordering::Relaxed)).max(self.configured);
        ttl.saturating_add(drift(ttl, self.drift_factor))
    }

    /// Restarts seen on `node`: connections that found another `run_id` than the one before.
    pub(crate) fn restarts(&self, node: usize) -> u64 {
        self.restarts
            .get(node)
            .map_or(0, |r| r.load(Ordering::Relaxed))
    }

    /// Reads the node's set-up replies again if it has a new connection since the last reading. `false` if that
    /// connection's reading is incomplete: what is known may be of another process than the one answering.
    fn refresh(&self, known: &mut Node, fanout: &impl Nodes, node: usize, ids: SetupIds) -> bool {
        let session = fanout.sessions(node);
        if known.session == session {
            return true;
        }
        match known.read(session, &fanout.setup_replies(node), ids) {
            Read::Incomplete => false,
            Read::Same | Read::New { restarted: false } => true,
            Read::New { restarted: true } => {
                if let Some(r) = self.restarts.get(node) {
                    r.fetch_add(1, Ordering::Relaxed);
                }
                true
            }
        }
    }

    /// Whether node `node`'s "yes" on `key` may count at `now`: by the window rule (trusted at once, or up longer
    /// than the window), or, for an extension of a lock acquired at `since`, because the node's process has been
    /// up since before `since` (it has not restarted since our `SET`, so the value it holds is the one we set; see
    /// "Extensions"). `since = None` (an acquisition, or an extension by value): the window rule alone. `ids` says
    /// where the readings are among the set-up replies.
    pub(crate) fn trusts(
        &self,
        fanout: &impl Nodes,
        (node, key): (usize, &[u8]),
        ids: SetupIds,
        now: Instant,
        since: Option<Instant>,
    ) -> bool {
        let Some(slot) = self.nodes.get(node) else {
            return false;
        };
        let mut known = lock(slot);
        if !self.refresh(&mut known, fanout, node, ids) {
            return false;
        }
        let window = self.window();
        // A cluster master that took over as a promoted replica, or took over the key's slot: a restart at that
        // instant, with no proof that lets it count sooner (see "Failovers in a cluster member").
        let promoted = fanout.taken_over(node, Some(key));
        if promoted.is_some_and(|at| now.saturating_duration_since(at) < window) {
            return false;
        }
        known.counts(now, window, !fanout.in_cluster(node))
            || since.is_some_and(|since| {
                let needed = now.saturating_duration_since(since);
                let age = known.age.map(|age| age.at(now));
                let served = promoted.map_or(Duration::MAX, |at| now.saturating_duration_since(at));
                age.is_some_and(|age| age.min(served) >= needed)
            })
    }

    /// Why node `node`'s votes do not count while its current server process runs, if its `INFO` says its
    /// monotonic clock is broken (see "A broken monotonic clock"); `None` otherwise, and while its connection's
    /// reading is incomplete (the node is not trusted then anyway).
    pub(crate) fn broken_clock(
        &self,
        fanout: &impl Nodes,
        node: usize,
        ids: SetupIds,
    ) -> Option<String> {
        let slot = self.nodes.get(node)?;
        let mut known = lock(slot);
        if !self.refresh(&mut known, fanout, node, ids) {
            return None;
        }
        known.broken_clock.clone()
    }

    /// What the guard knows of `node` at `now`, from its current connection's set-up replies (nothing is sent);
    /// for votes on `key` if given (a slot it took over counts as a promotion), else for any key.
    pub(crate) fn standing(
        &self,
        fanout: &impl Nodes,
        (node, key): (usize, Option<&[u8]>),
        ids: SetupIds,
        now: Instant,
    ) -> Standing {
        let Some(slot) = self.nodes.get(node) else {
            return Standing::default();
        };
        let mut known = lock(slot);
        if !self.refresh(&mut known, fanout, node, ids) {
            return Standing::default();
        }
        let window = self.window();
        // A promoted cluster master counts a window after the promotion was seen, whatever else it proves.
        let promoted = fanout
            .taken_over(node, key)
            .map(|at| window.saturating_sub(now.saturating_duration_since(at)))
            .filter(|left| !left.is_zero());
        let marker = !fanout.in_cluster(node);
        Standing {
            trusted_at_once: known.trusted_at_once(now, window, marker) && promoted.is_none(),
            up: known.age.map(|age| age.at(now)),
            counted_in: known.counted_in(now, window, marker).max(promoted),
            broken_clock: known.broken_clock.is_some(),
        }
    }
}

/// Whether a process's settings qualify on a new connection: `seen` whether this manager read the node before,
/// `restarted` whether another process answers now, `before` what was known of the process read before (its
/// settings persisted, they qualified), `persists` this reading.
fn settings_qualify(seen: bool, restarted: bool, before: (bool, bool), persists: bool) -> bool {
    let (persisted, qualified) = before;
    match (seen, restarted) {
        // The first reading: the process's configuration stands for its predecessor's.
        (false, _) => persists,
        // A restart seen: the predecessor must have persisted too.
        (true, true) => persists && persisted,
        // The same process again: once not qualified, never (writes before a runtime change).
        (true, false) => persists && qualified,
    }
}

mod info;
#[cfg(test)]
mod tests;
