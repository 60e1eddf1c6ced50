//! What a simulated node did with each lock value it was given: every command that carries a lock value (an
//! acquisition's `SET NX` or script, an extension's compare-and-pexpire, a release's compare-and-delete, native or
//! scripted, a clean-up's batch release) leaves one [`Did`] per key on the node that ran it, read from the command
//! and the node's own reply. `calls.rs` judges every outcome a call reports for a node against these (`truth.rs`).
//!
//! A command the node did not run (refused by its ACL, a lost script, a cluster node's redirection) leaves
//! nothing. The scripts whose reply does not say plainly what they did for one value (reentrant holds, permits,
//! readers and writers, the waiting line's offers and leaves) leave an [`Effect::Other`] for each argument: the
//! judge does not hold an outcome on such a node against the record.

use bytes::Bytes;
use muxlock::redlock::{lua, scripts};
use muxlock::resp::Value;

use super::node::Time;

/// What one command did with one key and the lock value it carried.
#[derive(Clone, Debug)]
pub struct Did {
    /// When the node ran it (virtual time).
    pub at: Time,
    pub key: Bytes,
    pub value: Bytes,
    pub effect: Effect,
}

/// What a command carrying a lock value did with its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Set the key to the value (an acquisition granted).
    Set,
    /// Left it: another value held the key (an acquisition refused).
    Refused,
    /// The key held the value, and its expiry was set (an extension granted).
    Extended,
    /// The key held the value, and was deleted (a release, or a clean-up, granted).
    Deleted,
    /// The key did not hold the value (another one's, or none): an extension or release refused.
    NotFound,
    /// A script whose reply does not say what it did for this value.
    Other,
}

impl Effect {
    /// The node did what was asked with the value: set, extended or deleted it.
    pub fn granted(self) -> bool {
        matches!(self, Effect::Set | Effect::Extended | Effect::Deleted)
    }
}

/// The script a command runs (`EVAL` by body, `EVALSHA` by hash): its SHA1, or `None` for any other command.
fn script_of(cmd: &[&[u8]]) -> Option<&'static str> {
    let verb = cmd.first()?;
    let a1 = cmd.get(1)?;
    let mut known = super::node::all_scripts().iter();
    if verb.eq_ignore_ascii_case(b"EVALSHA") {
        return known
            .map(|(sha, _)| *sha)
            .find(|sha| sha.as_bytes().eq_ignore_ascii_case(a1));
    }
    if verb.eq_ignore_ascii_case(b"EVAL") {
        return known
            .find(|(_, body)| body.as_bytes() == *a1)
            .map(|(sha, _)| *sha);
    }
    None
}

/// Whether `sha` is `l`'s.
fn is(sha: &str, l: lua::Lua) -> bool {
    sha == l.sha1
}

/// A script call's keys and arguments.
fn keys_args<'a>(cmd: &[&'a [u8]]) -> (Vec<&'a [u8]>, Vec<&'a [u8]>) {
    let numkeys = cmd
        .get(2)
        .and_then(|n| std::str::from_utf8(n).ok())
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(0);
    let rest = cmd.get(3..).unwrap_or_default();
    let numkeys = numkeys.min(rest.len());
    (rest[..numkeys].to_vec(), rest[numkeys..].to_vec())
}

/// Each key of `cmd` with the lock value it carries for it, and what the node's `reply` says it did with them
/// (none for a command that carries no lock value, or that the node refused to run).
pub fn effects(cmd: &[&[u8]], reply: &Value, at: Time) -> Vec<Did> {
    let a = |i: usize| cmd.get(i).copied().unwrap_or_default();
    let did = |key: &[u8], value: &[u8], effect: Effect| Did {
        at,
        key: Bytes::copy_from_slice(key),
        value: Bytes::copy_from_slice(value),
        effect,
    };
    let ok = matches!(reply, Value::SimpleString(s) if &s[..] == b"OK");
    let null = matches!(reply, Value::NullBulk | Value::Null);
    let int = |r: &Value| match r {
        Value::Integer(n) => Some(*n),
        _ => None,
    };
    let Some(verb) = cmd.first() else {
        return Vec::new();
    };
    let verb = verb.to_ascii_uppercase();
    match &verb[..] {
        b"SET" => {
            let has = |w: &[u8]| cmd.iter().position(|c| c.eq_ignore_ascii_case(w));
            let effect = |yes, no| match (ok, null) {
                (true, _) => Some(yes),
                (_, true) => Some(no),
                _ => None,
            };
            if let Some(i) = has(b"IFEQ") {
                let e = effect(Effect::Extended, Effect::NotFound);
                return e.map(|e| did(a(1), a(i + 1), e)).into_iter().collect();
            }
            if has(b"NX").is_some() {
                let e = effect(Effect::Set, Effect::Refused);
                return e.map(|e| did(a(1), a(2), e)).into_iter().collect();
            }
            Vec::new()
        }
        b"DELIFEQ" | b"DELEX" => {
            let value = match &verb[..] {
                b"DELIFEQ" => a(2),
                _ => a(3),
            };
            match int(reply) {
                Some(1) => vec![did(a(1), value, Effect::Deleted)],
                Some(0) => vec![did(a(1), value, Effect::NotFound)],
                _ => Vec::new(),
            }
        }
        b"EVAL" | b"EVALSHA" => {
            let Some(sha) = script_of(cmd) else {
                return Vec::new();
            };
            if matches!(reply, Value::Error(_) | Value::BulkError(_)) {
                return Vec::new();
            }
            let (keys, args) = keys_args(cmd);
            let arg = |i: usize| args.get(i).copied().unwrap_or_default();
            let each = |yes: bool, good: Effect, bad: Effect| {
                let e = if yes { good } else { bad };
                keys.iter().map(|k| did(k, arg(0), e)).collect()
            };
            let n = int(reply);
            if sha == scripts::RELEASE_SHA1 || is(sha, lua::RELEASE_FENCED) {
                let e = match n {
                    Some(1) => Effect::Deleted,
                    _ => Effect::NotFound,
                };
                return vec![did(keys.first().copied().unwrap_or_default(), arg(0), e)];
            }
            if sha == scripts::EXTEND_SHA1 || is(sha, lua::EXTEND_MANY) {
                return each(n == Some(1), Effect::Extended, Effect::NotFound);
            }
            if is(sha, lua::RELEASE_MANY) {
                return each(n.is_some_and(|n| n > 0), Effect::Deleted, Effect::NotFound);
            }
            if is(sha, lua::ACQUIRE_MANY) || is(sha, lua::ACQUIRE_ONE) {
                return each(n == Some(1), Effect::Set, Effect::Refused);
            }
            if is(sha, lua::ACQUIRE_FENCED) {
                return each(n.is_some_and(|n| n > 0), Effect::Set, Effect::Refused);
            }
            if is(sha, lua::RELEASE_BATCH) {
                let Value::Array(each) = reply else {
                    return Vec::new();
                };
                return (keys.iter().zip(&args).zip(each))
                    .filter_map(|((k, v), r)| match int(r) {
                        Some(1) => Some(did(k, v, Effect::Deleted)),
                        Some(0) => Some(did(k, v, Effect::NotFound)),
                        _ => None,
                    })
                    .collect();
            }
            let key = keys.first().copied().unwrap_or_default();
            args.iter().map(|v| did(key, v, Effect::Other)).collect()
        }
        _ => Vec::new(),
    }
}

/// Whether `cmd` carries `value` (as any of its arguments: a lock value is drawn at random, no key or number
/// is one).
pub fn carries(cmd: &[Bytes], value: &[u8]) -> bool {
    cmd.iter().any(|a| &a[..] == value)
}

/// The lock values `cmd` carries for `key`: an acquisition's, an extension's or a release's (a batch release
/// carries one per key).
pub fn values_for(cmd: &[Bytes], key: &[u8]) -> Vec<Bytes> {
    let refs: Vec<&[u8]> = cmd.iter().map(|a| &a[..]).collect();
    // What the command would carry, as if the node had granted it: the effects' keys and values.
    let granted = match refs.first().map(|v| v.to_ascii_uppercase()) {
        Some(v) if v == b"SET" => Value::SimpleString(Bytes::from_static(b"OK")),
        Some(v) if v == b"EVAL" || v == b"EVALSHA" => match script_of(&refs) {
            Some(sha) if is(sha, lua::RELEASE_BATCH) => {
                let (keys, _) = keys_args(&refs);
                Value::Array(keys.iter().map(|_| Value::Integer(1)).collect())
            }
            _ => Value::Integer(1),
        },
        _ => Value::Integer(1),
    };
    effects(&refs, &granted, 0)
        .into_iter()
        .filter(|d| &d.key[..] == key)
        .map(|d| d.value)
        .collect()
}
