//! What a node can prove about its own persistence: the two readings behind "trusted at once" (see
//! `restart.rs` for the argument that uses them).
//!
//! - **Its settings**, from `CONFIG GET *append*`: `appendonly yes`, `appendfsync always` and
//!   `no-appendfsync-on-rewrite no`. The pattern `*append*` (one pattern, so that Redis before 7.0 accepts it too)
//!   matches all three.
//! - **Its persistence marker**, the key [`PERSIST_MARKER_KEY`], from one script ([`MARKER_SCRIPT`]) run on every new
//!   connection: it writes the key if it is missing (`SET NX`, no expiry) with the node's wall-clock time in
//!   milliseconds and its `run_id`, and answers how long ago the key was written, by the node's clock. A marker
//!   older than the restart window proves that the node has not lost its whole data set within a window: every
//!   lock that may still be live was granted while the marker was there, and a node that keeps the marker keeps
//!   what it logged with it.
//!
//! Either reading may be refused (`CONFIG` renamed, an ACL without `+config|get`, `+eval`, `+time`, `+info`,
//! `+set` or `+get` on `muxlock:persist-marker`, `-OOM`, `-READONLY`): the refusal is kept as the reply, and reads
//! as "not proven" — the node gets the window rule, never trust. (`-LOADING` fails the whole set-up instead: the
//! node is dialled again until it has loaded, see "A node that is loading" in `net/state.rs`.)

use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::resp::{Value, encode_command};

/// The marker's key: reserved for muxlock. Its value is `<unix milliseconds> <run_id>` of the process that wrote it.
///
/// An operator who provisions a **brand-new** node (empty data, so it never granted a lock) may write it
/// beforehand with an old time, e.g. `SET muxlock:persist-marker "0 provisioned" NX`, so that the node is
/// trusted at once from its first start. Writing it on a node that may have lost data defeats the guard.
pub const PERSIST_MARKER_KEY: &str = "muxlock:persist-marker";

/// The marker script: `KEYS[1]` is [`PERSIST_MARKER_KEY`]. Returns `{age_ms, value}`: how long ago, by the node's wall
/// clock, the marker was written (negative if the clock stepped back), and the marker itself. A value that does
/// not start with a number is an error reply (not proven).
///
/// `redis.replicate_commands()` (a no-op from Redis 7 on) lets a Redis 3.2–4 script write after `TIME`.
pub(crate) const MARKER_SCRIPT: &str = "if redis.replicate_commands then redis.replicate_commands() end \
local t = redis.call('TIME') \
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
local id = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') or '?' \
redis.call('SET', KEYS[1], now .. ' ' .. id, 'NX') \
local v = redis.call('GET', KEYS[1]) \
local w = tonumber(string.match(v, '^(%d+)')) \
if not w then return redis.error_reply('ERR muxlock:persist-marker does not start with a time') end \
return {now - w, v}";

/// `CONFIG GET *append*` and the marker script, pipelined (after `INFO server`) on every new connection.
pub(crate) fn setup_commands() -> [Bytes; 2] {
    let mut config = BytesMut::new();
    encode_command(&[b"CONFIG", b"GET", b"*append*"], &mut config);
    let mut marker = BytesMut::new();
    encode_command(
        &[
            b"EVAL",
            MARKER_SCRIPT.as_bytes(),
            b"1",
            PERSIST_MARKER_KEY.as_bytes(),
        ],
        &mut marker,
    );
    [config.freeze(), marker.freeze()]
}

/// Whether a `CONFIG GET *append*` reply says `appendonly yes`, `appendfsync always` and
/// `no-appendfsync-on-rewrite no` (an array of name, value pairs in RESP2, a map in RESP3; anything else, an error
/// reply or a missing setting included, says no).
///
/// `no-appendfsync-on-rewrite yes` skips the `fsync` while a `BGSAVE` or an AOF rewrite runs (Redis'
/// `flushAppendOnlyFile`), so a write acknowledged then may be lost on a crash: such a node does not persist
/// every write.
pub(crate) fn settings_persist(reply: &Value) -> bool {
    let pairs: Vec<(&Value, &Value)> = match reply.without_attributes() {
        Value::Array(items) => items
            .chunks_exact(2)
            .map(|pair| (&pair[0], &pair[1]))
            .collect(),
        Value::Map(entries) => entries.iter().map(|(k, v)| (k, v)).collect(),
        _ => return false,
    };
    let is = |name: &[u8], want: &[u8]| {
        pairs.iter().any(
            |(k, v)| match (k.without_attributes(), v.without_attributes()) {
                (Value::BulkString(k), Value::BulkString(v)) => {
                    k.eq_ignore_ascii_case(name) && v.eq_ignore_ascii_case(want)
                }
                _ => false,
            },
        )
    };
    is(b"appendonly", b"yes")
        && is(b"appendfsync", b"always")
        && is(b"no-appendfsync-on-rewrite", b"no")
}

/// How old the marker is at least, from the marker script's reply: its `age_ms` less 1 ms (both times are
/// truncated to the millisecond), 0 if negative. `None` for anything else (a refusal): not proven.
pub(crate) fn marker_age(reply: &Value) -> Option<Duration> {
    match reply.without_attributes() {
        Value::Array(items) => match items.first().map(Value::without_attributes) {
            Some(Value::Integer(ms)) => Some(Duration::from_millis(
                u64::try_from(*ms).unwrap_or(0).saturating_sub(1),
            )),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)], resp3: bool) -> Value {
        let b = |s: &str| Value::BulkString(Bytes::from(s.to_owned()));
        if resp3 {
            Value::Map(pairs.iter().map(|(k, v)| (b(k), b(v))).collect())
        } else {
            Value::Array(pairs.iter().flat_map(|(k, v)| [b(k), b(v)]).collect())
        }
    }

    #[test]
    fn only_appendonly_with_fsync_always_and_no_skipped_fsync_persists() {
        const GOOD: [(&str, &str); 4] = [
            ("appendonly", "yes"),
            ("appendfsync", "always"),
            ("appendfilename", "a.aof"),
            ("no-appendfsync-on-rewrite", "no"),
        ];
        for resp3 in [false, true] {
            assert!(settings_persist(&config(&GOOD, resp3)));
            for (i, bad) in [(0, "no"), (1, "everysec"), (3, "yes")] {
                let mut pairs = GOOD;
                pairs[i].1 = bad;
                assert!(!settings_persist(&config(&pairs, resp3)), "{pairs:?}");
            }
            // A setting missing (an old reading of `append*` lacks the third): no.
            assert!(!settings_persist(&config(&GOOD[..3], resp3)));
        }
        // `CONFIG` refused: the error reply is kept as the reply, and says no.
        assert!(!settings_persist(&Value::Error(Bytes::from(
            "ERR unknown command 'CONFIG'"
        ))));
        assert!(!settings_persist(&Value::Integer(1)));
    }

    #[test]
    fn the_marker_age_is_read_one_millisecond_short() {
        let reply = |ms: i64| {
            Value::Array(vec![
                Value::Integer(ms),
                Value::BulkString(Bytes::from("1 x")),
            ])
        };
        assert_eq!(
            marker_age(&reply(90_000)),
            Some(Duration::from_millis(89_999))
        );
        assert_eq!(marker_age(&reply(0)), Some(Duration::ZERO));
        // The node's clock stepped back: as if written now.
        assert_eq!(marker_age(&reply(-5_000)), Some(Duration::ZERO));
        assert_eq!(
            marker_age(&reply(i64::MAX)),
            Some(Duration::from_millis(i64::MAX as u64 - 1))
        );
        // Refused (ACL, OOM, read-only, a key of another type): not proven.
        assert_eq!(
            marker_age(&Value::Error(Bytes::from("NOPERM no permissions"))),
            None
        );
        assert_eq!(marker_age(&Value::Array(vec![])), None);
        assert_eq!(marker_age(&Value::Integer(5)), None);
    }

    #[test]
    fn the_setup_asks_for_every_setting_and_the_marker() {
        let [config, marker] = setup_commands();
        assert!(config.ends_with(b"$8\r\n*append*\r\n"));
        assert!(marker.starts_with(b"*4\r\n$4\r\nEVAL\r\n"));
        assert!(marker.ends_with(b"$22\r\nmuxlock:persist-marker\r\n"));
    }
}
