//! The clock bracket of a cluster node's writes: a lease round's commands to a cluster node go between two
//! `TIME`s in the same write, on that node's own connection, and each command's outcome is handed up with the
//! node's clock as read before and after it ([`Bracket`]), for the engine's clock check to judge
//! (`redlock/engine/clock.rs`). This layer only reads: it judges nothing.
//!
//! # Why here
//!
//! The engine's bracket cannot carry a cluster member's request: its commands go to the masters of their slots
//! (one request may span several), a keyless `TIME` has no slot, and a command redirected by `MOVED` or `ASK`
//! runs on a master whose clock the `TIME`s beside the first write did not read. So every write this layer makes
//! to a cluster node in a round that asks for it ([`MembersRound::time_writes`](super::MembersRound::time_writes))
//! is `TIME`, the commands (an `ASK`'s `ASKING` after the first `TIME`: the flag lasts for the next command
//! only), `TIME`, then the replication check if it is on (`replid.rs`); a resend after a redirection is a write
//! of its own, bracketed again. The outcomes of a write's commands are held until the last of those is read (the
//! second `TIME`, or the replication check's `INFO` after it), as the replication check holds them, and each is
//! handed up with its own write's readings: the node it ran on, read around it.
//!
//! # What a missing reading means
//!
//! A write refused or timed out whole files its outcomes in any order, so a held outcome may be released before
//! a `TIME`'s reply is filed: a `TIME` before that did not come is handed up as a failure to read the clock, one
//! after as a timeout (the node is slow, its clock unread: as the engine's own bracket says of a second `TIME`
//! that did not come). An outcome that no bracket covers (a command failed before it was sent, a round's end)
//! is a failure or a timeout already.

use bytes::BytesMut;

use crate::net::{NodeError, Reply};

/// `TIME`, encoded.
pub(crate) const TIME: &[u8] = b"*1\r\n$4\r\nTIME\r\n";

/// A cluster node's clock read around one write of a round: the replies of the `TIME` before its commands and of
/// the one after. Handed up with each outcome of the write ([`MembersRound::take_bracket`](super::MembersRound::take_bracket)).
#[derive(Clone, Debug, PartialEq)]
pub struct Bracket {
    /// The reply of the `TIME` before the commands.
    pub before: Reply,
    /// The reply of the `TIME` after them.
    pub after: Reply,
}

impl Bracket {
    /// The bracket of readings `before` and `after`, either of which may not have come (see the module doc).
    pub(super) fn of(before: Option<Reply>, after: Option<Reply>) -> Bracket {
        Bracket {
            before: before.unwrap_or_else(|| {
                Err(NodeError::Cluster(
                    "no reply to the TIME before the command".to_owned(),
                ))
            }),
            after: after.unwrap_or(Err(NodeError::Timeout)),
        }
    }
}

/// Appends `TIME` to `bytes`: one reply more.
pub(super) fn append_time(bytes: &mut BytesMut) {
    bytes.extend_from_slice(TIME);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_is_encoded_as_the_encoder_would() {
        let mut encoded = BytesMut::new();
        crate::resp::encode_command(&[b"TIME"], &mut encoded);
        assert_eq!(&encoded[..], TIME);
    }

    #[test]
    fn a_missing_reading_before_is_no_reading_and_after_a_timeout() {
        let b = Bracket::of(None, None);
        assert!(matches!(b.before, Err(NodeError::Cluster(_))));
        assert_eq!(b.after, Err(NodeError::Timeout));
        let ok: Reply = Ok(crate::resp::Value::Integer(1));
        let b = Bracket::of(Some(ok.clone()), Some(ok.clone()));
        assert_eq!((b.before, b.after), (ok.clone(), ok));
    }
}
