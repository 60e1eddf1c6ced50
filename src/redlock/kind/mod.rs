//! The kinds of lock as values: each knows what its acquisition round gives, its scripts and how to read their
//! replies; the engine (`engine/`) runs their rounds. Every kind is handed out as one
//! [`Lock`](crate::redlock::Lock), its kind inside.
//!
//! - `lock`: [`Lock`](crate::redlock::Lock), one resource (`SET NX PX`, the release and extend scripts);
//! - `set`: several resources all or none (one script per node);
//! - `fenced`: a lock with a fencing token; its module doc is the safety argument;
//! - `reentrant`: [`Owner`](crate::redlock::Owner) and its holds, counted per owner;
//! - batches are plain [`Lock`](crate::redlock::Lock)s acquired together (`engine/batch.rs`).
//!
//! Here too, the replies every kind shares: a `SET NX`'s and a compare-and-X script's.

pub(crate) mod fenced;
pub(crate) mod lock;
pub(crate) mod owner;
pub(crate) mod queued;
pub(crate) mod reentrant;
pub(crate) mod set;

use crate::net::Reply;
use crate::redlock::error::Outcome;
use crate::redlock::quorum::Vote;
use crate::redlock::scripts::{Script, Via};
use crate::resp::Value;

/// What a round's reply means for the vote.
pub(crate) fn set_vote(reply: Reply) -> (Vote, Outcome) {
    match reply {
        Ok(v) => match v.without_attributes() {
            Value::SimpleString(s) if &s[..] == b"OK" => (Vote::Yes, Outcome::Granted),
            Value::NullBulk | Value::Null => (Vote::Taken, Outcome::Taken),
            other => (Vote::Failed, unexpected(other)),
        },
        Err(e) => (Vote::Failed, Outcome::Failed(e)),
    }
}

fn unexpected(v: &Value) -> Outcome {
    match v {
        Value::Error(msg) | Value::BulkError(msg) => {
            Outcome::ErrorReply(String::from_utf8_lossy(msg).into_owned())
        }
        other => Outcome::ErrorReply(format!("unexpected reply {other:?}")),
    }
}

/// What a compare-and-X script's reply means: 1 is done for us, 0 is "the key is not ours", anything else failed.
pub(crate) fn script_vote(reply: &Reply) -> (Vote, Outcome) {
    match reply {
        Ok(v) => match v.without_attributes() {
            Value::Integer(1) => (Vote::Yes, Outcome::Granted),
            Value::Integer(0) => (Vote::Taken, Outcome::Taken),
            other => (Vote::Failed, unexpected(other)),
        },
        Err(e) => (Vote::Failed, Outcome::Failed(e.clone())),
    }
}

/// What a compare-and-X reply means, by the way it went: the scripts and `DELIFEQ`/`DELEX` reply 1 or 0, the
/// native extension (`SET IFEQ PX`) `+OK` or nil.
pub(crate) fn compare_vote(script: Script, via: Via, reply: &Reply) -> (Vote, Outcome) {
    match (script, via) {
        (Script::Extend, Via::Native(_)) => match reply {
            Ok(v) => match v.without_attributes() {
                Value::SimpleString(s) if &s[..] == b"OK" => (Vote::Yes, Outcome::Granted),
                Value::NullBulk | Value::Null => (Vote::Taken, Outcome::Taken),
                other => (Vote::Failed, unexpected(other)),
            },
            Err(e) => (Vote::Failed, Outcome::Failed(e.clone())),
        },
        _ => script_vote(reply),
    }
}

/// Why a node refused to run a compare-and-X request at all (nothing ran: the key is untouched), so that it
/// may go another way on that node without costing its vote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// `NOSCRIPT`: the node has lost the script; send it in full.
    NoScript,
    /// `ERR unknown command` (no such command, or `EVAL` disabled), `NOPERM` (the user's ACL), or `ERR syntax
    /// error` (a `SET` that does not know `IFEQ`): refused before anything ran.
    Command,
}

/// Whether `reply` is a refusal (see [`Refused`]), and which.
pub(crate) fn refused(reply: &Reply) -> Option<Refused> {
    let Ok(Value::Error(m) | Value::BulkError(m)) = reply.as_ref().map(Value::without_attributes)
    else {
        return None;
    };
    if m.starts_with(b"NOSCRIPT") {
        Some(Refused::NoScript)
    } else if (m.starts_with(b"NOPERM") && !forbids_a_key(m))
        || m.starts_with(b"ERR unknown command")
        || m.starts_with(b"ERR syntax error")
    {
        Some(Refused::Command)
    } else {
        None
    }
}

/// Whether a `NOPERM` is for a key (the user's key patterns: Redis' "no permissions to access one of the keys",
/// Valkey's "No permissions to access a key"), not for the command: no other way of sending the request would be
/// allowed, and the node's native command is not to blame (read as a refusal, it turned the node off its native
/// release for the rest of the connection, so a user without Lua could release nothing there any more).
fn forbids_a_key(m: &[u8]) -> bool {
    let has = |w: &[u8]| m.windows(w.len()).any(|x| x.eq_ignore_ascii_case(w));
    has(b"key") && !has(b"command")
}

pub(crate) fn is_noscript(reply: &Reply) -> bool {
    matches!(reply.as_ref().map(Value::without_attributes), Ok(Value::Error(m)) if m.starts_with(b"NOSCRIPT"))
}

/// The name of a key derived from `resource` (a fencing counter, a hold count): `prefix + resource` on plain
/// members, as always. When some member is a Redis Cluster (`routed`), the key must lie in the resource's slot
/// or its script is `CROSSSLOT`: a resource with a hash tag (`{invoice}:42`) shares it with `prefix + resource`;
/// an untagged one is wrapped, `prefix + "{" + resource + "}"`, which hashes like the resource itself. A resource
/// with a brace but no hash tag can be colocated neither way: the engine refuses it on cluster members before
/// anything is sent ([`Engine::check_routable`](crate::redlock::engine::Engine::check_routable)).
///
/// Every client of a deployment must name keys alike: the naming follows the members (a deployment whose
/// members become clusters starts new counters: fencing tokens restart from the largest any node still holds
/// under the new name, so change members only with no fenced lock in use).
pub(crate) fn derived_key(prefix: &[u8], resource: &[u8], routed: bool) -> Vec<u8> {
    if !routed || crate::net::cluster::hash_tag(resource).len() != resource.len() {
        return [prefix, resource].concat();
    }
    [prefix, b"{", resource, b"}"].concat()
}

/// Whether `resource`'s derived keys can share its slot ([`derived_key`]): it has a hash tag, or no brace.
pub(crate) fn colocatable(resource: &[u8]) -> bool {
    crate::net::cluster::hash_tag(resource).len() != resource.len()
        || !resource.iter().any(|&b| b == b'{' || b == b'}')
}

#[cfg(test)]
mod tests {
    use super::{colocatable, derived_key};
    use crate::net::cluster::key_slot;

    #[test]
    fn derived_keys_share_the_resource_slot_on_cluster_members() {
        // Plain members: the prefix and the resource, unwrapped.
        assert_eq!(derived_key(b"p:", b"r", false), b"p:r");
        assert_eq!(derived_key(b"p:", b"{t}x", false), b"p:{t}x");
        // Cluster members: an untagged resource is wrapped, a tagged one keeps its tag.
        for (resource, expected) in [
            (&b"invoice:42"[..], &b"p:{invoice:42}"[..]),
            (b"{t}x", b"p:{t}x"),
        ] {
            let key = derived_key(b"p:", resource, true);
            assert_eq!(key, expected);
            assert_eq!(key_slot(&key), key_slot(resource));
            assert!(colocatable(resource));
        }
        // A brace without a tag cannot be colocated.
        for resource in [&b"a{b"[..], b"a}b", b"{}x"] {
            assert!(!colocatable(resource), "{resource:?}");
        }
    }
}
