//! [`Owner`]: who holds a reentrant lock (see [`reentrant`](super::reentrant)).

use std::fmt;

use crate::redlock::token;

/// Who holds a reentrant lock: a random value (40 hex digits) shared by every acquisition of one owner. Clone it
/// into every thread or task that acts as that owner.
#[derive(Clone, PartialEq, Eq)]
pub struct Owner {
    pub(crate) value: token::Value,
}

impl Owner {
    /// The owner's value, as stored in the keys it holds.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.value).unwrap_or_default()
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Owner").field(&self.as_str()).finish()
    }
}
