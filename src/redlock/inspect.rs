//! [`Inspection`]: what each node holds under a resource's key, read without taking or changing the lock.
//!
//! [`LockManager::inspect`](super::LockManager::inspect) pipelines `GET key` and `PTTL key` to every node in one
//! round; this module turns each node's two replies into a [`KeyState`] (a pure function, tested without sockets)
//! and says whether a majority holds one value.

use std::fmt;
use std::time::Duration;

use crate::net::{NodeAddr, NodeError, Reply};
use crate::redlock::error::Outcome;
use crate::resp::Value;

/// What one node holds under the resource's key.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyState {
    /// The key does not exist (never set, released, or expired).
    Absent,
    /// The key holds `value`.
    Held {
        /// The key's value: for a lock taken by muxlock, the holder's 40 hex digits.
        value: Vec<u8>,
        /// The time the key has left to live, to the millisecond, as the node counts it; `None` for a key without
        /// an expiry (not a Redlock key: something else wrote it).
        ttl: Option<Duration>,
    },
    /// The node gave no usable answer: down, timed out, or an error reply (`WRONGTYPE` for a key that is not a
    /// string, say).
    Failed(Outcome),
}

impl KeyState {
    /// The value, if the node holds the key.
    pub fn value(&self) -> Option<&[u8]> {
        match self {
            KeyState::Held { value, .. } => Some(value),
            _ => None,
        }
    }

    /// Whether the node answered usably: with the key or without it (an error reply is no usable answer).
    pub fn answered(&self) -> bool {
        !matches!(self, KeyState::Failed(_))
    }
}

impl fmt::Display for KeyState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyState::Absent => f.write_str("absent"),
            KeyState::Held { value, ttl } => {
                write!(f, "{}", String::from_utf8_lossy(value))?;
                match ttl {
                    Some(ttl) => write!(f, " for {ttl:?}"),
                    None => f.write_str(" without expiry"),
                }
            }
            KeyState::Failed(outcome) => outcome.fmt(f),
        }
    }
}

/// Every node's view of one resource's key, from [`LockManager::inspect`](super::LockManager::inspect).
///
/// A snapshot taken in one round: each node's `GET` and `PTTL` ran back to back, but nodes were read at slightly
/// different moments. [`holder`](Inspection::holder) says whether a majority holds one value, which is what
/// another client's acquisition would run into; it cannot say whether the holder still considers its lease valid
/// (its clock, not the nodes', decides that).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inspection {
    pub(crate) resource: Vec<u8>,
    pub(crate) nodes: Vec<(NodeAddr, KeyState)>,
    pub(crate) quorum: usize,
}

impl Inspection {
    /// The resource (the Redis key) that was read.
    pub fn resource(&self) -> &[u8] {
        &self.resource
    }

    /// Each node (password hidden when displayed) and what it holds, in configuration order.
    pub fn nodes(&self) -> &[(NodeAddr, KeyState)] {
        &self.nodes
    }

    /// The majority: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// How many nodes answered usably: with the key or without it.
    pub fn answered(&self) -> usize {
        self.nodes.iter().filter(|(_, s)| s.answered()).count()
    }

    /// How many nodes hold `value` under the key.
    pub fn holding(&self, value: &[u8]) -> usize {
        self.nodes
            .iter()
            .filter(|(_, s)| s.value() == Some(value))
            .count()
    }

    /// The value a majority of nodes holds, if any: the lock's holder as the nodes see it.
    pub fn holder(&self) -> Option<&[u8]> {
        // At most one value can reach a majority; checking each node's value finds it.
        self.nodes
            .iter()
            .filter_map(|(_, s)| s.value())
            .find(|v| self.holding(v) >= self.quorum)
    }
}

impl fmt::Display for Inspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = String::from_utf8_lossy(&self.resource);
        match self.holder() {
            Some(v) => write!(
                f,
                "{name:?} is held on {} of {} nodes ({} needed) by {}",
                self.holding(v),
                self.nodes.len(),
                self.quorum,
                String::from_utf8_lossy(v)
            )?,
            None => write!(
                f,
                "{name:?} is not held by a majority ({} of {} nodes answered, {} needed)",
                self.answered(),
                self.nodes.len(),
                self.quorum
            )?,
        }
        for (addr, state) in &self.nodes {
            write!(f, "; {addr}: {state}")?;
        }
        Ok(())
    }
}

/// One node's state from its replies to `GET key` and `PTTL key`, in that order. `pttl` is `None` when the round
/// ended without its outcome (it never does: every request gets one; kept as a failure rather than a panic).
pub(crate) fn key_state(get: Reply, pttl: Option<Reply>) -> KeyState {
    let value = match get {
        Err(e) => return KeyState::Failed(Outcome::Failed(e)),
        Ok(v) => match v.without_attributes() {
            Value::NullBulk | Value::Null => return KeyState::Absent,
            Value::BulkString(b) => b.to_vec(),
            other => return KeyState::Failed(unexpected(other)),
        },
    };
    let Some(pttl) = pttl else {
        return KeyState::Failed(Outcome::Failed(NodeError::Timeout));
    };
    match pttl {
        Err(e) => KeyState::Failed(Outcome::Failed(e)),
        Ok(v) => match v.without_attributes() {
            // The key expired between the two commands: it is gone.
            Value::Integer(-2) => KeyState::Absent,
            Value::Integer(-1) => KeyState::Held { value, ttl: None },
            Value::Integer(ms) if *ms >= 0 => KeyState::Held {
                value,
                ttl: Some(Duration::from_millis(ms.unsigned_abs())),
            },
            other => KeyState::Failed(unexpected(other)),
        },
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

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Reply {
        Ok(Value::BulkString(s.as_bytes().to_vec().into()))
    }

    fn int(n: i64) -> Option<Reply> {
        Some(Ok(Value::Integer(n)))
    }

    fn node(port: u16) -> NodeAddr {
        NodeAddr::new("127.0.0.1", port)
    }

    #[test]
    fn key_states_from_replies() {
        let held = |ms| KeyState::Held {
            value: b"v".to_vec(),
            ttl: Some(Duration::from_millis(ms)),
        };
        assert_eq!(key_state(bulk("v"), int(1500)), held(1500));
        assert_eq!(key_state(bulk("v"), int(0)), held(0));
        assert_eq!(
            key_state(bulk("v"), int(-1)),
            KeyState::Held {
                value: b"v".to_vec(),
                ttl: None
            }
        );
        assert_eq!(key_state(bulk("v"), int(-2)), KeyState::Absent);
        assert_eq!(key_state(Ok(Value::NullBulk), int(-2)), KeyState::Absent);
        assert_eq!(key_state(Ok(Value::Null), int(-2)), KeyState::Absent);
        assert_eq!(
            key_state(Err(NodeError::Refused), Some(Err(NodeError::Refused))),
            KeyState::Failed(Outcome::Failed(NodeError::Refused))
        );
        let wrongtype = Ok(Value::Error("WRONGTYPE Operation".into()));
        assert_eq!(
            key_state(wrongtype, int(5)),
            KeyState::Failed(Outcome::ErrorReply("WRONGTYPE Operation".into()))
        );
        assert!(matches!(
            key_state(bulk("v"), Some(Ok(Value::Integer(-7)))),
            KeyState::Failed(Outcome::ErrorReply(_))
        ));
        assert_eq!(
            key_state(bulk("v"), Some(Err(NodeError::Timeout))),
            KeyState::Failed(Outcome::Failed(NodeError::Timeout))
        );
        assert_eq!(
            key_state(bulk("v"), None),
            KeyState::Failed(Outcome::Failed(NodeError::Timeout))
        );
    }

    #[test]
    fn the_holder_needs_a_majority_of_one_value() {
        let held = |v: &str| KeyState::Held {
            value: v.as_bytes().to_vec(),
            ttl: Some(Duration::from_secs(1)),
        };
        let inspection = |states: Vec<KeyState>| Inspection {
            resource: b"r".to_vec(),
            quorum: states.len() / 2 + 1,
            nodes: states
                .into_iter()
                .enumerate()
                .map(|(i, s)| (node(7000 + i as u16), s))
                .collect(),
        };
        let down = || KeyState::Failed(Outcome::Failed(NodeError::Refused));
        let i = inspection(vec![
            held("a"),
            held("a"),
            down(),
            held("a"),
            KeyState::Absent,
        ]);
        assert_eq!(i.holder(), Some(&b"a"[..]));
        assert_eq!((i.holding(b"a"), i.answered(), i.quorum()), (3, 4, 3));
        let shown = i.to_string();
        assert!(
            shown.starts_with("\"r\" is held on 3 of 5 nodes (3 needed) by a;"),
            "{shown}"
        );
        assert!(
            shown.contains("redis://127.0.0.1:7002: connection refused"),
            "{shown}"
        );
        let split = inspection(vec![held("a"), held("a"), held("b"), held("b"), down()]);
        assert_eq!(split.holder(), None);
        assert!(
            split
                .to_string()
                .contains("not held by a majority (4 of 5 nodes answered")
        );
        assert_eq!(inspection(vec![KeyState::Absent; 3]).holder(), None);
        assert_eq!(inspection(vec![held("x")]).holder(), Some(&b"x"[..]));
    }
}
