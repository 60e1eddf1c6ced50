//! The restart-aware quorum: the spec's "delayed restart", done by the client.
//!
//! The Redlock page (*Performance, crash recovery and fsync*): a node that restarts without its data (no
//! `appendfsync always`) may forget a lock it granted, and a second client could then gather a majority while the
//! first still holds the lock. The cure it proposes is to keep a restarted node unavailable for more than the
//! longest TTL in use, so that every lock it forgot has expired anyway.
//!
//! muxlock cannot delay the server's start, so it delays *trusting* it. On every new connection it pipelines
//! `INFO server` and reads the node's `run_id` and `uptime_in_seconds`; a node that started less than the window
//! ago (the largest TTL this manager has used, or a configured window if larger, plus the drift allowance), or
//! whose `run_id` changed since the last connection, keeps answering but its "yes" votes are not counted until the
//! window has passed.
//!
//! # Nodes that persist every write are trusted at once
//!
//! The guard exists because a restarted node may have forgotten the keys it granted. A node that persists every
//! write before it answers forgets nothing: with `appendonly yes` and `appendfsync always`, Redis appends each
//! write to its append-only file and `fsync`s it before the reply goes out (in `beforeSleep`, the AOF is flushed and
//! synced before pending replies are written), and a write or `fsync` error under `always` makes the server exit
//! rather than answer. On restart it reloads the file before it serves anyone (clients get `-LOADING` meanwhile),
//! and a key's expiry is logged as an absolute Unix time (`PEXPIREAT`/`PXAT`; from Redis 5 on a script's
//! effects are logged, so an extension's `PEXPIRE` is too), so a lock it granted comes back with the same end. Such a
//! restart takes nothing from the majority, and keeping the node out for a window would cost availability for no
//! safety: the cold start of a new deployment (every node "just started") would refuse every lock for a whole
//! lease.
//!
//! So each new connection also sends `CONFIG GET append*` (one command, any Redis version), and a node that reports
//! `appendonly yes` and `appendfsync always` is trusted at once. What this relies on, and its limits:
//!
//! - **The reading is of the process that answers now; the forgotten keys would be its predecessor's.** The guard
//!   takes the new process's configuration as its predecessor's: both normally come from the same configuration
//!   file. Where this manager saw the predecessor itself (a changed `run_id` on a later connection), it requires
//!   that the predecessor reported `always` too, else the window applies to the new process as before. And a process
//!   once found not to qualify is not trusted at once later in its life (a reading of `always` after
//!   `CONFIG SET appendfsync always` at run time does not cover the writes before it).
//! - **Persistence turned on at run time** (`CONFIG SET appendonly yes`) reads as `yes` at once, while the first
//!   rewrite is still writing the file: a process that was started without the AOF, turned it on, and is then
//!   restarted within a lease may come back without locks it granted before. Turn persistence on in the
//!   configuration file (or the command line), as `muxlock cluster up` does, not at run time.
//! - **A node that refuses `CONFIG`** (renamed by `rename-command`, not allowed to the ACL user, a managed service)
//!   gets the window rule below: its refusal is kept as the reply, not counted as a failure of the connection.
//! - **What it costs the nodes.** `appendfsync always` puts an `fsync` in every write's path: see BENCHMARKS.md
//!   ("the cost of appendfsync always") for the figures on this machine.
//!
//! # Which way each figure may err, and why the guard is still safe
//!
//! The guard needs a *lower* bound on how long the node's process has been up. Every figure it uses may err, and
//! each is taken so that the error makes the node look younger, never older:
//!
//! - **`uptime_in_seconds` is truncated twice.** Redis computes it as `unixtime - stat_starttime`, two wall-clock
//!   times in *whole* seconds (the start as `time(NULL)`, the present as its cached clock). A server that started
//!   at 12.98 s and answers at 13.01 s reports 1 after 30 ms. From `floor(t) - floor(s) = u` follows only
//!   `t - s > u - 1`: the guard takes `u - 1` seconds (0 for a reading of 0 or 1). Taking `u` itself trusted
//!   a node up to a whole second too early (issue #15: a contender got the lock 0.16–0.9 s before the holder's
//!   lease ended, after a majority restarted just before a second ended).
//! - **Redis' cached clock lags.** `unixtime` is refreshed by the event loop, so it may be older than the moment
//!   the reply is built: that makes `u` smaller, the safe way.
//! - **The moment the reading is true.** The lower bound holds at the instant the server built the reply; the
//!   guard dates it at the instant the reply was *decoded* on this side (recorded by the connection with the
//!   reply), which is later. A later date makes the start look later: safe. (Dating it at the request's send
//!   would not be: the server may build the reply after that.)
//! - **Time since then is measured on `Instant`**, the monotonic clock, and compared as a duration: no instant is
//!   computed by subtracting an uptime, which could not be represented on a client that booted after the node
//!   (the old code then trusted the node at once, whatever the window).
//! - **A changed `run_id`** means another server process answers at this address (a restart, a failover to a
//!   replica that may lack recent writes): its uptime says nothing about when it took over, so the window counts
//!   from the decoding of the new connection's `INFO`, by which time the takeover had happened.
//! - **No readable uptime** (a field missing, a negative value after the node's wall clock stepped back): the
//!   node is treated as started when the reply was read.
//! - **The window** is the longest lease in use, in milliseconds rounded up (as sent in `PX`), plus the drift
//!   allowance (`ttl × drift_factor + 2 ms`). The allowance covers a node whose clock runs slower than ours (its
//!   forgotten keys would have lived longer in real time) and Redis' millisecond expiry granularity.
//!
//! # What the guard cannot see
//!
//! - **A node whose wall clock steps forward** right after it started reports a larger uptime: Redis' uptime is
//!   wall-clock based and the client has no other view of the node's start. Where safety matters, prefer nodes
//!   that persist every write (`appendfsync always`); then a restart forgets nothing and the guard is not needed.
//! - **Leases longer than this manager has used**, taken by other clients of the same nodes: set
//!   [`Config::restart_window`](super::Config::restart_window) to the longest TTL any client uses.
//! - **A proxy that reconnects to another backend behind one client connection**: the client sees no new
//!   connection, so no new `INFO`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::quorum::drift;
use crate::net::Fanout;
use crate::resp::{Value, encode_command};
use crate::sync::lock;

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
    /// The last reading of this process's persistence said `appendonly yes` and `appendfsync always`.
    persists: bool,
    /// Trusted at once: it persists every write, and so did the process before it as far as this manager saw, and
    /// so it has since this manager first read it (see the module docs).
    trusted: bool,
}

/// What the guard knows of one node, for [`Stats`](super::Stats) and for errors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Standing {
    /// Trusted at once (it persists every write); `false` before the first reading.
    pub(crate) trusted_at_once: bool,
    /// How long the process has been up at least, if read.
    pub(crate) up: Option<Duration>,
    /// How long until its grants count, if they do not yet.
    pub(crate) counted_in: Option<Duration>,
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

/// `INFO server` and `CONFIG GET append*`, pipelined in this order on every new connection. The second may be
/// refused (`CONFIG` renamed or not allowed): its error reply is then its reply, and the node gets the window rule.
pub(crate) fn setup_commands() -> [Bytes; 2] {
    let mut info = BytesMut::new();
    encode_command(&[b"INFO", b"server"], &mut info);
    let mut config = BytesMut::new();
    encode_command(&[b"CONFIG", b"GET", b"append*"], &mut config);
    [info.freeze(), config.freeze()]
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

    /// Whether node `node`'s "yes" may count at `now`. `info_index` is the position of `INFO server` among the
    /// fanout's set-up commands; `CONFIG GET append*` follows it.
    pub(crate) fn trusts(
        &self,
        fanout: &Fanout,
        node: usize,
        info_index: usize,
        now: Instant,
    ) -> bool {
        let Some(slot) = self.nodes.get(node) else {
            return false;
        };
        let mut known = lock(slot);
        self.refresh(&mut known, fanout, node, info_index, now);
        known.trusted || known.age.is_some_and(|age| age.at(now) >= self.window())
    }

    /// Reads the node's set-up replies again if it has a new connection since the last reading.
    fn refresh(
        &self,
        known: &mut Node,
        fanout: &Fanout,
        node: usize,
        info_index: usize,
        now: Instant,
    ) {
        let session = fanout.sessions(node);
        if known.session == session {
            return;
        }
        let replies = fanout.setup_replies(node);
        let (run_id, age) = match replies.get(info_index) {
            Some((reply, read_at)) => reading(reply, *read_at, known.run_id.as_ref()),
            // No reply to go by (cannot happen once a vote came on this connection): as if just started.
            None => (
                None,
                Age {
                    at: now,
                    least: Duration::ZERO,
                },
            ),
        };
        let persists = replies
            .get(info_index + 1)
            .is_some_and(|(reply, _)| persists(reply));
        let changed = matches!((&known.run_id, &run_id), (Some(old), Some(new)) if old != new);
        if changed {
            self.restarts[node].fetch_add(1, Ordering::Relaxed);
        }
        known.trusted = trusted_at_once(
            known.age.is_some(),
            changed,
            (known.persists, known.trusted),
            persists,
        );
        known.persists = persists;
        known.run_id = run_id;
        known.age = Some(age);
        known.session = session;
    }

    /// What the guard knows of `node` at `now`, from its current connection's set-up replies (nothing is sent).
    pub(crate) fn standing(
        &self,
        fanout: &Fanout,
        node: usize,
        info_index: usize,
        now: Instant,
    ) -> Standing {
        let Some(slot) = self.nodes.get(node) else {
            return Standing::default();
        };
        let mut known = lock(slot);
        self.refresh(&mut known, fanout, node, info_index, now);
        let up = known.age.map(|age| age.at(now));
        let counted_in = match up {
            _ if known.trusted => None,
            Some(up) => Some(self.window().saturating_sub(up)).filter(|d| !d.is_zero()),
            None => None,
        };
        Standing {
            trusted_at_once: known.trusted,
            up,
            counted_in,
        }
    }
}

/// Whether a node is trusted at once on a new connection: `seen` whether this manager read the node before,
/// `changed` whether another process answers now, `before` what was known of the process read before (it
/// persisted, it was trusted at once), `persists` this reading.
fn trusted_at_once(seen: bool, changed: bool, before: (bool, bool), persists: bool) -> bool {
    let (persisted, was_trusted) = before;
    match (seen, changed) {
        // The first reading: the process's configuration stands for its predecessor's.
        (false, _) => persists,
        // A restart seen: the predecessor must have persisted too.
        (true, true) => persists && persisted,
        // The same process again: once not trusted, never trusted at once (writes before a runtime change).
        (true, false) => persists && was_trusted,
    }
}

/// Whether a `CONFIG GET append*` reply says `appendonly yes` and `appendfsync always` (an array of name, value
/// pairs in RESP2, a map in RESP3; anything else, an error reply included, says no).
fn persists(reply: &Value) -> bool {
    let pairs: Vec<(&Value, &Value)> = match reply.without_attributes() {
        Value::Array(items) => items
            .chunks_exact(2)
            .map(|pair| (&pair[0], &pair[1]))
            .collect(),
        Value::Map(entries) => entries.iter().map(|(k, v)| (k, v)).collect(),
        _ => return false,
    };
    let get = |name: &[u8]| {
        pairs.iter().find_map(
            |(k, v)| match (k.without_attributes(), v.without_attributes()) {
                (Value::BulkString(k), Value::BulkString(v)) if k.eq_ignore_ascii_case(name) => {
                    Some(v.clone())
                }
                _ => None,
            },
        )
    };
    let is =
        |value: Option<Bytes>, want: &[u8]| value.is_some_and(|v| v.eq_ignore_ascii_case(want));
    is(get(b"appendonly"), b"yes") && is(get(b"appendfsync"), b"always")
}

/// What an `INFO server` reply decoded at `read_at` says of the process's age, given the `run_id` seen on the
/// node's previous connection. See the module docs for why each bound errs on the young side.
fn reading(reply: &Value, read_at: Instant, previous: Option<&Bytes>) -> (Option<Bytes>, Age) {
    let (run_id, uptime) = parse_info(reply);
    let changed = matches!((previous, &run_id), (Some(old), Some(new)) if old != new);
    let least = match uptime {
        // A different process than last time: when it took over is unknown, but it was before this reply.
        _ if changed => Duration::ZERO,
        // Two truncated wall-clock seconds: `floor(now) - floor(start) = u` only gives `now - start > u - 1`.
        Some(u) => Duration::from_secs(u.saturating_sub(1)),
        None => Duration::ZERO,
    };
    (run_id, Age { at: read_at, least })
}

/// `run_id` and `uptime_in_seconds` from an `INFO server` reply (a bulk string in RESP2, verbatim in RESP3).
fn parse_info(reply: &Value) -> (Option<Bytes>, Option<u64>) {
    let text = match reply.without_attributes() {
        Value::BulkString(b) | Value::Verbatim { data: b, .. } => b,
        _ => return (None, None),
    };
    let (mut run_id, mut uptime) = (None, None);
    for line in text.split(|&c| c == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(v) = line.strip_prefix(b"run_id:") {
            run_id = Some(text.slice_ref(v));
        } else if let Some(v) = line.strip_prefix(b"uptime_in_seconds:") {
            uptime = std::str::from_utf8(v).ok().and_then(|s| s.parse().ok());
        }
    }
    (run_id, uptime)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(run_id: &str, uptime: &str) -> Value {
        let text = format!(
            "# Server\r\nredis_version:7.0.15\r\nrun_id:{run_id}\r\nuptime_in_seconds:{uptime}\r\n"
        );
        Value::BulkString(Bytes::from(text))
    }

    fn config(pairs: &[(&str, &str)], resp3: bool) -> Value {
        let b = |s: &str| Value::BulkString(Bytes::from(s.to_owned()));
        if resp3 {
            Value::Map(pairs.iter().map(|(k, v)| (b(k), b(v))).collect())
        } else {
            Value::Array(pairs.iter().flat_map(|(k, v)| [b(k), b(v)]).collect())
        }
    }

    #[test]
    fn only_appendonly_with_fsync_always_persists() {
        for resp3 in [false, true] {
            let always = [
                ("appendonly", "yes"),
                ("appendfsync", "always"),
                ("appendfilename", "a.aof"),
            ];
            assert!(persists(&config(&always, resp3)));
            assert!(!persists(&config(
                &[("appendonly", "yes"), ("appendfsync", "everysec")],
                resp3
            )));
            assert!(!persists(&config(
                &[("appendonly", "no"), ("appendfsync", "always")],
                resp3
            )));
            assert!(!persists(&config(&[("appendfsync", "always")], resp3)));
        }
        // `CONFIG` refused: the error reply is kept as the reply, and says no.
        assert!(!persists(&Value::Error(Bytes::from(
            "ERR unknown command 'CONFIG'"
        ))));
        assert!(!persists(&Value::Integer(1)));
        // An odd-length array (not a pairs list) reads its pairs and ignores the rest.
        let b = |s: &str| Value::BulkString(Bytes::from(s.to_owned()));
        let odd = Value::Array(vec![
            b("appendonly"),
            b("yes"),
            b("appendfsync"),
            b("always"),
            b("x"),
        ]);
        assert!(persists(&odd));
    }

    #[test]
    fn trust_at_once_needs_every_process_seen_to_persist() {
        // First reading: the configuration stands for the predecessor's.
        assert!(trusted_at_once(false, false, (false, false), true));
        assert!(!trusted_at_once(false, false, (false, false), false));
        // A restart: the predecessor this manager saw must have persisted too.
        assert!(trusted_at_once(true, true, (true, true), true));
        assert!(!trusted_at_once(true, true, (false, false), true));
        assert!(!trusted_at_once(true, true, (true, true), false));
        // The same process on a new connection: trusted only if it was already.
        assert!(trusted_at_once(true, false, (true, true), true));
        assert!(!trusted_at_once(true, false, (false, false), true));
        assert!(!trusted_at_once(true, false, (true, true), false));
    }

    #[test]
    fn info_fields_are_read_in_both_protocols() {
        let text = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n";
        let bulk = Value::BulkString(Bytes::from(text));
        assert_eq!(parse_info(&bulk), (Some(Bytes::from("abc123")), Some(42)));
        let verbatim = Value::Verbatim {
            format: *b"txt",
            data: Bytes::from(text),
        };
        assert_eq!(
            parse_info(&verbatim),
            (Some(Bytes::from("abc123")), Some(42))
        );
        assert_eq!(parse_info(&Value::Integer(1)), (None, None));
    }

    #[test]
    fn the_window_is_the_longest_lease_in_use_plus_drift() {
        let guard = RestartGuard::new(3, Duration::from_secs(1), 0.01);
        assert_eq!(guard.window(), Duration::from_millis(1000 + 12));
        guard.note_ttl(5000);
        guard.note_ttl(2000);
        assert_eq!(guard.window(), Duration::from_millis(5000 + 52));
    }

    /// Redis' uptime is `floor(now) - floor(start)`: a reading of `u` means more than `u - 1` seconds.
    #[test]
    fn a_whole_second_uptime_is_a_bound_one_second_short() {
        let t0 = Instant::now();
        let age = |uptime: &str| reading(&info("a", uptime), t0, None).1;
        // Started at 12.98 s, asked at 13.01 s: "1" after 30 ms of real uptime.
        assert_eq!(age("1").least, Duration::ZERO);
        assert_eq!(age("0").least, Duration::ZERO);
        assert_eq!(age("2").least, Duration::from_secs(1));
        assert_eq!(age("86400").least, Duration::from_secs(86_399));
        // Unreadable or negative (the node's wall clock stepped back): as if just started.
        assert_eq!(age("-3").least, Duration::ZERO);
        assert_eq!(age("soon").least, Duration::ZERO);
        assert_eq!(age("1").at, t0, "dated when the reply was read");
    }

    #[test]
    fn a_changed_run_id_counts_from_the_new_connection_whatever_the_uptime() {
        let t0 = Instant::now();
        let old = Bytes::from("a");
        let (run_id, age) = reading(&info("b", "86400"), t0, Some(&old));
        assert_eq!(run_id, Some(Bytes::from("b")));
        assert_eq!(
            age,
            Age {
                at: t0,
                least: Duration::ZERO
            }
        );
        let (_, same) = reading(&info("a", "86400"), t0, Some(&old));
        assert_eq!(same.least, Duration::from_secs(86_399));
    }

    /// On a virtual clock: a node that reports "up 1 s" is trusted a full window after the reading, not a window
    /// minus a second (what the guard did before issue #15).
    #[test]
    fn a_node_read_as_up_one_second_waits_the_whole_window() {
        let t0 = Instant::now();
        let window = Duration::from_millis(1500);
        let (_, age) = reading(&info("a", "1"), t0, None);
        assert!(age.at(t0 + Duration::from_millis(600)) < window);
        assert!(age.at(t0 + Duration::from_millis(1499)) < window);
        assert!(age.at(t0 + window) >= window);
        // Ages are durations: an uptime longer than this machine's monotonic clock has run is not a problem.
        let (_, old) = reading(&info("a", &u64::MAX.to_string()), t0, None);
        assert!(old.at(t0) >= Duration::from_secs(365 * 24 * 3600));
        assert_eq!(old.at(t0 - Duration::from_millis(1)), old.least);
    }
}
