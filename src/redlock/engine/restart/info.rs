//! What an `INFO` reply says of a node's process: its `run_id`, its age (see the parent's "Which way each figure
//! may err"), and whether it was promoted from a replica (see "Failovers in a cluster member").

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::Age;
use crate::resp::Value;

/// What an `INFO server` reply decoded at `read_at` says of the process's age, given the `run_id` seen on the
/// node's previous connection. See the module docs for why each bound errs on the young side.
pub(super) fn reading(
    reply: &Value,
    read_at: Instant,
    previous: Option<&Bytes>,
) -> (Option<Bytes>, Age) {
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

/// Whether an `INFO` reply with the replication section says the process was promoted from a replica at some
/// time: `second_repl_offset` is -1 until a replica becomes a master (its old replication id is kept for partial
/// resyncs from then on). `false` without the section.
pub(super) fn was_promoted(reply: &Value) -> bool {
    let text = match reply.without_attributes() {
        Value::BulkString(b) | Value::Verbatim { data: b, .. } => b,
        _ => return false,
    };
    text.split(|&c| c == b'\n').any(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        line.strip_prefix(b"second_repl_offset:")
            .is_some_and(|v| v != b"-1")
    })
}

/// `run_id` and `uptime_in_seconds` from an `INFO server` reply (a bulk string in RESP2, verbatim in RESP3).
pub(super) fn parse_info(reply: &Value) -> (Option<Bytes>, Option<u64>) {
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
