//! [`Lost`]: why a guard's lock is lost (see [`guard`](super::guard)).

use std::fmt;

use crate::redlock::error::{Error, Report};

/// Why a guard's lock is lost.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lost {
    /// A majority of nodes no longer holds this lock's value: the key was deleted, overwritten, or expired and
    /// taken by someone else. The report lists every node's outcome in the round that found it.
    Taken(Box<Report>),
    /// A renewal found too few nodes still holding the lock for a majority once the nodes that are down are
    /// counted out: they refuse connections or closed them, and a node that restarts without persistence comes
    /// back without the key. The report lists every node's outcome in that renewal.
    Down(Box<Report>),
    /// A renewal found too few nodes still holding the lock for a majority once the nodes whose clocks disagree
    /// with this client's are counted out (the clock check, [`Config::with_clock_check`]): a clock that jumped
    /// forward or runs fast lets the key expire early there, so those copies are not counted on. Reported as
    /// soon as a renewal sees it, before the lease's margin. The report lists every node's outcome (theirs:
    /// [`NodeError::Clock`](crate::net::NodeError::Clock), with how far off each clock was).
    ///
    /// [`Config::with_clock_check`]: crate::redlock::Config::with_clock_check
    Clock(Box<Report>),
    /// The lease ran down to its margin with no renewal confirmed by a majority: nodes hung, slow or partitioned
    /// away, or this process paused past it. The last renewal's error, if one failed.
    Expired(Option<Box<Error>>),
    /// The guard was released.
    Released,
}

impl fmt::Display for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lost::Taken(r) => write!(f, "too few nodes still hold the lock for a majority ({r})"),
            Lost::Down(r) => write!(
                f,
                "too many nodes holding the lock are down for a majority ({r})"
            ),
            Lost::Clock(r) => write!(
                f,
                "too many nodes holding the lock have clocks that disagree with this client's for a majority ({r})"
            ),
            Lost::Expired(None) => f.write_str("the lease ran out before a renewal was confirmed"),
            Lost::Expired(Some(e)) => {
                write!(
                    f,
                    "the lease ran out before a renewal was confirmed (last renewal: {e})"
                )
            }
            Lost::Released => f.write_str("released"),
        }
    }
}
