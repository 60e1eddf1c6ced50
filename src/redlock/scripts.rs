//! The Lua scripts of the Redlock spec and the encoded requests of the hot path.
//!
//! Scripts are sent by `EVALSHA`; they are loaded with `SCRIPT LOAD` on every new connection, and a `NOSCRIPT`
//! reply (after a `SCRIPT FLUSH`, say) falls back to `EVAL` for that node.

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
