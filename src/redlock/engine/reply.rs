//! What the nodes' replies to the shared requests mean: a `SET NX`'s, a compare-and-X script's (or its native
//! command's), and a refusal to run a request at all (`NOSCRIPT`, an unknown or forbidden command). Every round
//! reads them; a kind's own scripts' replies are read in the kind's file.

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

/// What an acquisition script's reply means: 1 is granted, 0 is "held by another holder", anything else failed.
pub(crate) fn grant_vote(reply: &Reply) -> (Vote, Outcome) {
    match script_vote(reply) {
        (Vote::Taken, Outcome::NotHeld) => (Vote::Taken, Outcome::Taken),
        other => other,
    }
}

/// What a compare-and-X script's reply means: 1 is done for us, 0 is "the key is not ours" (another holder's or
/// gone), anything else failed.
pub(crate) fn script_vote(reply: &Reply) -> (Vote, Outcome) {
    match reply {
        Ok(v) => match v.without_attributes() {
            Value::Integer(1) => (Vote::Yes, Outcome::Granted),
            Value::Integer(0) => (Vote::Taken, Outcome::NotHeld),
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
                Value::NullBulk | Value::Null => (Vote::Taken, Outcome::NotHeld),
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

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::net::NodeError;

    fn error(text: &str) -> Reply {
        Ok(Value::Error(Bytes::from(text.to_owned())))
    }

    /// A refusal is an error that says nothing ran and another way may: a lost script, an unknown command, a
    /// `SET` without `IFEQ`, or an ACL that lacks the command (in Redis' and Valkey's words, as an error or a
    /// RESP3 bulk error). An ACL's refusal of a key, another error, a reply or a failure to get one is not.
    #[test]
    fn a_refusal_is_a_lost_script_or_a_command_the_node_will_not_run() {
        let table: &[(Reply, Option<Refused>)] = &[
            (
                error("NOSCRIPT No matching script."),
                Some(Refused::NoScript),
            ),
            (
                error("NOPERM this user has no permissions to run the 'eval' command"),
                Some(Refused::Command),
            ),
            (
                error("NOPERM User u has no permissions to run the 'delifeq' command"),
                Some(Refused::Command),
            ),
            // Redis ≥ 7.2 and Valkey name the user: one whose name has "key" in it is still refused a command.
            (
                error("NOPERM User keyholder has no permissions to run the 'delifeq' command"),
                Some(Refused::Command),
            ),
            (
                Ok(Value::BulkError(Bytes::from_static(
                    b"NOPERM User u has no permissions to run the 'delex' command",
                ))),
                Some(Refused::Command),
            ),
            (
                error("ERR unknown command 'DELIFEQ', with args beginning with: 'k' 'v'"),
                Some(Refused::Command),
            ),
            (error("ERR syntax error"), Some(Refused::Command)),
            (
                error(
                    "NOPERM this user has no permissions to access one of the keys used as arguments",
                ),
                None,
            ),
            (error("NOPERM No permissions to access a key"), None),
            (
                error("WRONGTYPE Operation against a key holding the wrong kind of value"),
                None,
            ),
            (error("BUSY Redis is busy running a script."), None),
            (Ok(Value::Integer(1)), None),
            (Ok(Value::NullBulk), None),
            (Err(NodeError::Timeout), None),
        ];
        for (reply, want) in table {
            assert_eq!(refused(reply), *want, "{reply:?}");
        }
    }
}
