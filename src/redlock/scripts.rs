//! The Lua scripts of the Redlock spec and the encoded requests of the hot path.
//!
//! Acquisitions and extensions send their scripts by `EVALSHA`; the scripts are loaded with `SCRIPT LOAD` on every
//! new connection, and a `NOSCRIPT` reply (after a `SCRIPT FLUSH`, say) makes the round send that node the script
//! in full (`EVAL`).
//!
//! # Releases go in full
//!
//! Every release that runs a script (the spec's compare-and-delete, and the other kinds' releases in
//! [`lua`](super::lua): `RELEASE_MANY`, `RELEASE_BATCH`, `RELEASE_FENCED`, `RELEASE_REENTRANT`, `QUEUE_LEAVE`)
//! is sent in full, `EVAL` of its body, never by hash (`Script::scripted`, `Purpose::Release` in
//! `engine/pipeline.rs`). Why: a `NOSCRIPT` can be answered only by someone who reads it, and a release's
//! replies are often read by nobody. A release round ends as soon as a majority confirmed (the other nodes'
//! replies come after it: a slow node, a paused one); a failed attempt's clean-up is never awaited; an async
//! release whose future is dropped after its first poll leaves its round; a request held for room is detached
//! from its round. By hash, a node that lost its scripts answered such a release `NOSCRIPT` to nobody and kept
//! the key (or an owned hold's field) until its lease ended, though the caller was told "released". In full,
//! nothing is left to answer: whenever it runs, on whichever connection, the release runs. The request needs
//! no reply to finish its work, which is what [`Fanout::release_round`](crate::net::Fanout::release_round)
//! asks of what it carries.
//!
//! The cost: the body's bytes on the wire (the spec's release is 101 bytes where its hash is 40) and the node's SHA1
//! of them before its script-cache look-up: about 2 µs on a lone caller's release round over five local nodes,
//! acquisitions unchanged (`scripts/latency-ab` against a build that releases by hash). The ACL: a release on a node
//! without a native compare-and-delete needs `+eval` (README, "Deploying: TLS and ACL users"); a user without it has
//! every such release refused (`NOPERM`, nothing runs), which an awaited release reports as its error, so the gap
//! shows at the first release rather than at a flush. Nodes with `DELIFEQ`/`DELEX` release natively and need no Lua.
//!
//! Where a node has them, the release and the extension go without Lua: `DELIFEQ key value` (Valkey >= 9.0) or
//! `DELEX key IFEQ value` (Redis >= 8.4) compare-and-delete, and `SET key value IFEQ value PX ttl` (both)
//! compare-and-extends: a few times less server time than the scripts, and no `+eval`/`+evalsha` in the user's ACL.
//! Which a node has is learned on each connection (`engine/native.rs`); `Via` names the way one request goes to one
//! node.

use bytes::{Bytes, BytesMut};

use crate::resp::{Decimal, encode_command};

/// Compare-and-delete, verbatim from the spec: delete the key only if it holds our value.
pub const RELEASE: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end"#;

/// SHA1 of [`RELEASE`], as `SCRIPT LOAD` returns it (checked against a real server by the tests).
pub const RELEASE_SHA1: &str = "b70c2384248f88e6b75b9f89241a180f856ad852";

/// Compare-and-pexpire: extend the key's expiry only if it holds our value. It never creates a key, so an
/// extension cannot bring back an expired lock.
pub const EXTEND: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end"#;

/// SHA1 of [`EXTEND`].
pub const EXTEND_SHA1: &str = "36e94d1c6e02fcefaa7ee5d79eee614dbac55f10";

/// The `SCRIPT LOAD` commands pipelined on every new connection.
pub(crate) fn setup_commands() -> Vec<Bytes> {
    [RELEASE, EXTEND]
        .into_iter()
        .chain(super::lua::ALL.iter().map(|l| l.body))
        .map(|script| {
            let mut buf = BytesMut::new();
            encode_command(&[b"SCRIPT", b"LOAD", script.as_bytes()], &mut buf);
            buf.freeze()
        })
        .collect()
}

/// `SET resource value NX PX ttl_ms`.
pub(crate) fn acquire(buf: &mut BytesMut, resource: &[u8], value: &[u8], ttl_ms: u64) {
    let ttl = Decimal::new(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
    encode_command(
        &[b"SET", resource, value, b"NX", b"PX", ttl.as_bytes()],
        buf,
    );
}

/// Which script, and whether by hash or in full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Script {
    Release,
    Extend,
}

impl Script {
    /// How this script goes to a node that has no native command for it (or refused it): a release in full
    /// (`EVAL`), an extension by hash (`EVALSHA`, in full after `NOSCRIPT`). See the module docs, "Releases go in
    /// full".
    #[inline]
    pub(crate) fn scripted(self) -> Via {
        match self {
            Script::Release => Via::Full,
            Script::Extend => Via::Sha,
        }
    }
}

/// A node's native compare-and-delete; either one implies `SET ... IFEQ` (Valkey >= 9.0 has `DELIFEQ` and, from
/// 8.1, `SET IFEQ`; Redis >= 8.4 and Valkey >= 9.2 have `DELEX` and `SET IFEQ`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Native {
    /// `DELIFEQ key value` (Valkey >= 9.0).
    DelIfEq,
    /// `DELEX key IFEQ value` (Redis >= 8.4, Valkey >= 9.2).
    DelEx,
}

/// How one compare-and-X request goes to one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    /// The script by hash (`EVALSHA`).
    Sha,
    /// The script in full (`EVAL`), after a `NOSCRIPT`.
    Full,
    /// The node's native commands: its compare-and-delete, or `SET IFEQ PX` for an extension.
    Native(Native),
}

/// Why [`set_if_eq`] refused to encode: without an expiry, `SET key value IFEQ value` *removes* the key's TTL
/// (Valkey's and Redis' `setGenericCommand` keep it only with `KEEPTTL` or a new expiry): a lock that never
/// expires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NoExpiry;

/// `SET resource value IFEQ value PX ttl_ms`: extends the key's expiry to `ttl_ms` only if it still holds
/// `value`; never creates the key (`IFEQ` on a missing key does nothing). Replies `+OK` if extended, nil if not
/// (read by `engine::reply::compare_vote`).
///
/// # Errors
///
/// [`NoExpiry`], with nothing written, if `ttl_ms` is 0: the command would carry no usable expiry, and `IFEQ`
/// without one drops the TTL. No other form of this command is ever encoded.
pub(crate) fn set_if_eq(
    buf: &mut BytesMut,
    resource: &[u8],
    value: &[u8],
    ttl_ms: u64,
) -> Result<(), NoExpiry> {
    if ttl_ms == 0 {
        return Err(NoExpiry);
    }
    let ttl = Decimal::new(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
    encode_command(
        &[
            b"SET",
            resource,
            value,
            b"IFEQ",
            value,
            b"PX",
            ttl.as_bytes(),
        ],
        buf,
    );
    Ok(())
}

/// The compare-and-X request for `script` on one node, the way `via` says: the script (by hash or in full), or
/// the node's native command. An extension whose native form is refused ([`NoExpiry`]) goes as the script.
pub(crate) fn compare(
    buf: &mut BytesMut,
    script: Script,
    via: Via,
    resource: &[u8],
    value: &[u8],
    ttl_ms: u64,
) {
    match (script, via) {
        (_, Via::Sha) => call(buf, script, false, resource, value, ttl_ms),
        (_, Via::Full) => call(buf, script, true, resource, value, ttl_ms),
        (Script::Release, Via::Native(Native::DelIfEq)) => {
            encode_command(&[b"DELIFEQ", resource, value], buf)
        }
        (Script::Release, Via::Native(Native::DelEx)) => {
            encode_command(&[b"DELEX", resource, b"IFEQ", value], buf)
        }
        (Script::Extend, Via::Native(_)) => {
            if set_if_eq(buf, resource, value, ttl_ms).is_err() {
                call(buf, script, false, resource, value, ttl_ms);
            }
        }
    }
}

/// `EVALSHA sha 1 resource value [ttl_ms]`, or `EVAL script ...` when `full`.
pub(crate) fn call(
    buf: &mut BytesMut,
    script: Script,
    full: bool,
    resource: &[u8],
    value: &[u8],
    ttl_ms: u64,
) {
    let (verb, body): (&[u8], &str) = match (script, full) {
        (Script::Release, false) => (b"EVALSHA", RELEASE_SHA1),
        (Script::Release, true) => (b"EVAL", RELEASE),
        (Script::Extend, false) => (b"EVALSHA", EXTEND_SHA1),
        (Script::Extend, true) => (b"EVAL", EXTEND),
    };
    match script {
        Script::Release => encode_command(&[verb, body.as_bytes(), b"1", resource, value], buf),
        Script::Extend => {
            let ttl = Decimal::new(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
            encode_command(
                &[verb, body.as_bytes(), b"1", resource, value, ttl.as_bytes()],
                buf,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(script: Script, via: Via, ttl_ms: u64) -> Vec<u8> {
        let mut buf = BytesMut::new();
        compare(&mut buf, script, via, b"lock:a", b"tok", ttl_ms);
        buf.to_vec()
    }

    /// The native requests, byte for byte.
    #[test]
    fn native_requests() {
        let table: &[(Script, Via, &[u8])] = &[
            (
                Script::Release,
                Via::Native(Native::DelIfEq),
                b"*3\r\n$7\r\nDELIFEQ\r\n$6\r\nlock:a\r\n$3\r\ntok\r\n",
            ),
            (
                Script::Release,
                Via::Native(Native::DelEx),
                b"*4\r\n$5\r\nDELEX\r\n$6\r\nlock:a\r\n$4\r\nIFEQ\r\n$3\r\ntok\r\n",
            ),
            (
                Script::Extend,
                Via::Native(Native::DelIfEq),
                b"*7\r\n$3\r\nSET\r\n$6\r\nlock:a\r\n$3\r\ntok\r\n$4\r\nIFEQ\r\n$3\r\ntok\r\n$2\r\nPX\r\n$4\r\n1500\r\n",
            ),
        ];
        for (script, via, want) in table {
            assert_eq!(encoded(*script, *via, 1500), *want, "{script:?} by {via:?}");
        }
        // Both natives extend the same way.
        assert_eq!(
            encoded(Script::Extend, Via::Native(Native::DelEx), 1500),
            encoded(Script::Extend, Via::Native(Native::DelIfEq), 1500)
        );
    }

    /// `SET IFEQ` without an expiry would drop the lock's TTL: the encoder refuses it and writes nothing, and the
    /// extension then goes as the script (which never touches the TTL but to set it).
    #[test]
    fn set_if_eq_refuses_no_expiry() {
        let mut buf = BytesMut::from(&b"before"[..]);
        assert_eq!(set_if_eq(&mut buf, b"lock:a", b"tok", 0), Err(NoExpiry));
        assert_eq!(&buf[..], b"before", "nothing written");
        assert_eq!(set_if_eq(&mut buf, b"lock:a", b"tok", 1), Ok(()));
        assert!(buf.ends_with(b"$2\r\nPX\r\n$1\r\n1\r\n"));
        let mut script = BytesMut::new();
        call(&mut script, Script::Extend, false, b"lock:a", b"tok", 0);
        assert_eq!(
            encoded(Script::Extend, Via::Native(Native::DelIfEq), 0),
            script.to_vec()
        );
        // Every SET IFEQ this crate encodes carries PX, whatever the lease.
        for ttl in [1, 7, 30_000, u64::MAX] {
            let bytes = encoded(Script::Extend, Via::Native(Native::DelEx), ttl);
            let text = String::from_utf8_lossy(&bytes);
            assert!(
                text.contains("IFEQ") && text.contains("\r\nPX\r\n"),
                "{text}"
            );
        }
    }

    /// The script ways are the scripts as before.
    #[test]
    fn script_ways() {
        for script in [Script::Release, Script::Extend] {
            for (via, full) in [(Via::Sha, false), (Via::Full, true)] {
                let mut want = BytesMut::new();
                call(&mut want, script, full, b"lock:a", b"tok", 1500);
                assert_eq!(encoded(script, via, 1500), want.to_vec());
            }
        }
    }
}
