//! The restart-aware quorum: the spec's "delayed restart", done by the client.
//!
//! The Redlock page (*Performance, crash recovery and fsync*): a node that restarts without its data (no
//! `appendfsync always`) may forget a lock it granted, and a second client could then gather a majority while the
//! first still holds the lock. The cure it proposes is to keep a restarted node unavailable for more than the
//! longest TTL in use, so that every lock it forgot has expired anyway.
//!
//! muxlock cannot delay the server's start, so it delays *trusting* it. On every new connection it pipelines
//! `INFO server` and reads the node's `run_id` and `uptime_in_seconds`; a node that restarted less than the window
//! ago (the largest TTL this manager has used, or a configured window if larger), or whose `run_id` changed since
//! the last connection, keeps answering but its "yes" votes are not counted until the window has passed.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::quorum::drift;
use crate::net::Fanout;
use crate::resp::{Value, encode_command};
use crate::sync::lock;
use crate::time::later;

/// What is known of one node's current server process.
#[derive(Debug, Default)]
struct Node {
    /// The connection (fanout session) this was read on.
    session: u64,
    run_id: Option<Bytes>,
    /// When the server process started, as far as we can tell (latest possible instant).
    restarted_at: Option<Instant>,
}

/// Tracks restarts per node and the window in force.
#[derive(Debug)]
pub(crate) struct RestartGuard {
    nodes: Vec<Mutex<Node>>,
    /// The largest lease used so far, in milliseconds.
    max_ttl_ms: AtomicU64,
    configured: Duration,
    drift_factor: f64,
}

/// `INFO server`, pipelined on every new connection.
pub(crate) fn setup_command() -> Bytes {
    let mut buf = BytesMut::new();
    encode_command(&[b"INFO", b"server"], &mut buf);
    buf.freeze()
}

impl RestartGuard {
    pub(crate) fn new(n: usize, configured: Duration, drift_factor: f64) -> RestartGuard {
        RestartGuard {
            nodes: (0..n).map(|_| Mutex::new(Node::default())).collect(),
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

    /// Whether node `node`'s "yes" may count at `now`. `info_index` is the position of `INFO server` among the
    /// fanout's set-up commands.
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
        let session = fanout.sessions(node);
        if known.session != session {
            let replies = fanout.setup_replies(node);
            let (run_id, uptime) = replies.get(info_index).map_or((None, None), parse_info);
            let changed = matches!((&known.run_id, &run_id), (Some(old), Some(new)) if old != new);
            known.restarted_at = match uptime {
                // A different server than last time: it may lack our keys whatever its uptime says.
                _ if changed => Some(now),
                // Whole seconds, rounded down: the latest instant the start can have been.
                Some(up) => now.checked_sub(Duration::from_secs(up)),
                // No uptime to go by: trust it no sooner than a whole window after this connection.
                None => Some(now),
            };
            known.run_id = run_id;
            known.session = session;
        }
        known
            .restarted_at
            .is_none_or(|at| now >= later(at, self.window()))
    }
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
}
