//! What an `INFO` reply says of a node's process: its `run_id`, its age (see the parent's "Which way each figure
//! may err"), whether it was promoted from a replica (see "Failovers in a cluster member"), and whether its
//! monotonic clock is broken (see "A broken monotonic clock").

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

/// The slowest rate a working processor counter shows in `monotonic_clock`: one tick a microsecond (an ARM
/// generic timer at 1 MHz; Redis prints ARM's rate in whole ticks, and never uses a counter below that).
const MIN_TICKS_PER_US: f64 = 1.0;
/// The fastest: 100 GHz, well above any processor's counter (x86 TSCs run at a few GHz). A calibration that
/// went wrong shows more: valkey-io/valkey#4345's smallest non-zero multiplier prints `16777216.00`.
const MAX_TICKS_PER_US: f64 = 100_000.0;

/// Why `INFO server`'s `monotonic_clock` line says the node's monotonic clock is broken, or `None` if it does not
/// (no such line, as on servers before it existed; `POSIX clock_gettime`; a processor counter at a plausible
/// rate; a rate in another unit than ticks/us, which this reading does not know). Broken: a processor counter (`<name> @ <rate> ticks/us`) whose rate is not a number, not finite (`inf`,
/// `nan`: a calibration that measured no time), or outside [`MIN_TICKS_PER_US`]..=[`MAX_TICKS_PER_US`] (`0.00`,
/// or the millions of a calibration gone wrong). Such a server's monotonic clock stands still or crawls: its
/// timers (`serverCron`, active expiry, the cached wall clock it advances by that clock) do not run.
pub(super) fn broken_monotonic(reply: &Value) -> Option<String> {
    let text = match reply.without_attributes() {
        Value::BulkString(b) | Value::Verbatim { data: b, .. } => b,
        _ => return None,
    };
    let line = text.split(|&c| c == b'\n').find_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        line.strip_prefix(b"monotonic_clock:")
    })?;
    let line = String::from_utf8_lossy(line);
    // `X86 TSC @ 2444.95 ticks/us`, `ARM CNTVCT @ 24 ticks/us`; anything without `@` names no rate.
    let (_, rate) = line.split_once(" @ ")?;
    // A rate in another unit is one this reading does not know: not judged.
    let rate = rate.trim().strip_suffix("ticks/us")?.trim();
    let ok = rate
        .parse::<f64>()
        .is_ok_and(|r| r.is_finite() && (MIN_TICKS_PER_US..=MAX_TICKS_PER_US).contains(&r));
    (!ok).then(|| {
        format!(
            "its monotonic clock is broken (INFO server: monotonic_clock:{line}; a rate outside 1 to 100000 \
             ticks/us: its timers and active expiry do not run): not counted while this server process runs"
        )
    })
}
