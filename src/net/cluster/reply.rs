//! Reading the cluster commands' replies as [`Value`]s, in both protocols: a RESP3 map and a RESP2 flat array of
//! key/value pairs are read alike, attributes are looked through, and anything else is a [`MapError`] saying
//! where in the reply it is and what was expected. Nothing here panics, whatever the value.

use std::fmt;

use crate::resp::Value;

/// Why a `CLUSTER SHARDS` or `CLUSTER SLOTS` reply gave no slot map.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MapError {
    /// The server answered with an error, e.g. `ERR unknown subcommand 'shards'` before Redis 7.0 (ask `CLUSTER
    /// SLOTS` then), or `ERR This instance has cluster support disabled` (not a cluster).
    Refused(String),
    /// The reply is not what the command returns: where in it, and what is wrong there.
    Malformed {
        /// The path to the faulty part, outermost first, e.g. `shard 2 > nodes[0] > port`.
        at: String,
        /// What is wrong, e.g. `"expected a port number from 1 to 65535"`.
        problem: &'static str,
    },
}

impl MapError {
    /// A malformed reply, at the current level (the callers above prepend their part of the path).
    pub(crate) fn malformed(problem: &'static str) -> MapError {
        MapError::Malformed {
            at: String::new(),
            problem,
        }
    }

    /// Prepends `part` to the path of a [`MapError::Malformed`].
    pub(crate) fn within(self, part: impl fmt::Display) -> MapError {
        match self {
            MapError::Malformed { at, problem } if at.is_empty() => MapError::Malformed {
                at: part.to_string(),
                problem,
            },
            MapError::Malformed { at, problem } => MapError::Malformed {
                at: format!("{part} > {at}"),
                problem,
            },
            refused => refused,
        }
    }

    /// Whether the server refused the command (rather than answering something unreadable).
    pub fn is_refused(&self) -> bool {
        matches!(self, MapError::Refused(_))
    }
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapError::Refused(msg) => write!(f, "the cluster refused to give its slot map: {msg}"),
            MapError::Malformed { at, problem } if at.is_empty() => {
                write!(f, "unreadable cluster slot map: {problem}")
            }
            MapError::Malformed { at, problem } => {
                write!(f, "unreadable cluster slot map at {at}: {problem}")
            }
        }
    }
}

impl std::error::Error for MapError {}

/// `value` without the RESP3 attributes around it.
pub(crate) fn plain(mut value: &Value) -> &Value {
    while let Value::Attribute { value: inner, .. } = value {
        value = inner;
    }
    value
}

/// An error reply as [`MapError::Refused`], with its text.
pub(crate) fn refused(value: &Value) -> Option<MapError> {
    match plain(value) {
        Value::Error(msg) | Value::BulkError(msg) => {
            Some(MapError::Refused(String::from_utf8_lossy(msg).into_owned()))
        }
        _ => None,
    }
}

/// The elements of an array (RESP2 or RESP3; a RESP3 set too).
pub(crate) fn array(value: &Value) -> Result<&[Value], MapError> {
    match plain(value) {
        Value::Array(items) | Value::Set(items) => Ok(items),
        _ => Err(MapError::malformed("expected an array")),
    }
}

/// The key/value pairs of a RESP3 map, or of a RESP2 array of alternating keys and values.
pub(crate) fn pairs(value: &Value) -> Result<Vec<(&Value, &Value)>, MapError> {
    match plain(value) {
        Value::Map(pairs) => Ok(pairs.iter().map(|(k, v)| (k, v)).collect()),
        Value::Array(flat) if flat.len() % 2 == 0 => {
            Ok(flat.chunks_exact(2).map(|kv| (&kv[0], &kv[1])).collect())
        }
        Value::Array(_) => Err(MapError::malformed(
            "expected key/value pairs (an array of even length)",
        )),
        _ => Err(MapError::malformed("expected a map")),
    }
}

/// The bytes of a string (bulk, simple or verbatim); `None` for a null.
pub(crate) fn text_or_null(value: &Value) -> Result<Option<&[u8]>, MapError> {
    match plain(value) {
        Value::BulkString(b) | Value::SimpleString(b) => Ok(Some(b)),
        Value::Verbatim { data, .. } => Ok(Some(data)),
        Value::NullBulk | Value::Null => Ok(None),
        _ => Err(MapError::malformed("expected a string")),
    }
}

/// The bytes of a string (bulk, simple or verbatim).
pub(crate) fn text(value: &Value) -> Result<&[u8], MapError> {
    text_or_null(value)?.ok_or_else(|| MapError::malformed("expected a string, got a null"))
}

/// A UTF-8 string.
pub(crate) fn utf8(value: &Value) -> Result<&str, MapError> {
    std::str::from_utf8(text(value)?).map_err(|_| MapError::malformed("expected UTF-8 text"))
}

/// An integer: a RESP integer, or a string of digits (as some servers write numbers in these replies).
pub(crate) fn integer(value: &Value) -> Result<i64, MapError> {
    match plain(value) {
        Value::Integer(n) => Ok(*n),
        Value::BulkString(b) | Value::SimpleString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| MapError::malformed("expected an integer")),
        _ => Err(MapError::malformed("expected an integer")),
    }
}

/// A TCP port, 1 to 65535.
pub(crate) fn port(value: &Value) -> Result<u16, MapError> {
    u16::try_from(integer(value)?)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| MapError::malformed("expected a port number from 1 to 65535"))
}

/// A slot number, 0 to 16,383.
pub(crate) fn slot(value: &Value) -> Result<u16, MapError> {
    u16::try_from(integer(value)?)
        .ok()
        .filter(|s| *s < super::SLOT_COUNT)
        .ok_or_else(|| MapError::malformed("expected a slot number from 0 to 16383"))
}
