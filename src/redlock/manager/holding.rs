//! [`LockManager`]'s verbs around holding and waiting: `cancel_waits`, and the check that a guard's TTL leaves
//! room to renew.

use std::time::Duration;

use super::LockManager;
use crate::redlock::error::{Error, Result};
use crate::redlock::schedule::lost_margin;

impl LockManager {
    /// Makes every request of this manager (and of its clones) that is [waiting](crate::redlock::Request::wait)
    /// for a lock at this moment give up, as if its `max_wait` had run out: it returns after at most the attempt
    /// under way (bounded by the round timeout), with that attempt's lock if it got one, else with its last
    /// error, or [`Error::Held`] if it had not made an attempt yet. Requests that start waiting later wait as
    /// usual.
    ///
    /// For an interrupt (Ctrl-C) while another thread waits: cancel, then release whatever the waiter returns.
    pub fn cancel_waits(&self) {
        self.keeper.waits.cancel_all();
    }

    /// A guard's TTL must leave a renewal at a third of it time to be confirmed before the guard's deadline.
    pub(crate) fn check_guard_ttl(&self, ttl: Duration) -> Result<()> {
        let config = &self.engine().config;
        config.check_ttl(ttl)?;
        let margin = lost_margin(ttl, config.round_timeout);
        let room = ttl
            .saturating_sub(config.allowance(ttl))
            .saturating_sub(margin);
        if room <= (ttl / 3).saturating_add(config.round_timeout) {
            return Err(Error::config(format!(
                "ttl {ttl:?} is too short for a guard with round_timeout {:?}: a renewal at a third of it could \
                 not be confirmed before the guard's deadline (give at least {:?})",
                config.round_timeout,
                config.round_timeout.saturating_mul(7)
            )));
        }
        Ok(())
    }
}
