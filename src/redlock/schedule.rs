//! [`Schedule`]: when each held guard's lease is due for renewal, as plain bookkeeping on a virtual clock (no
//! thread, no sockets), for the watchdog to act on.
//!
//! Guards are renewed at a third of their lease (Redisson's rule is a third of the TTL; here it is a third of the
//! lease the guard may count on, which can be shorter), or a round before their deadline if that is sooner (see
//! [`renewal_due`]); an attempt that failed without deciding is retried soon after, but never past the guard's local
//! deadline: from then on the guard is lost anyway. Guards that fall due close together are renewed together, in
//! one batch per tick, so that a thousand guards cost a few writes per node, not a thousand.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

/// A guard's name in the schedule.
pub(crate) type GuardId = u64;

/// When each guard is due.
#[derive(Debug, Default)]
pub(crate) struct Schedule {
    /// `(due, id)`, earliest first. An entry whose `due` no longer matches `due_of[id]` is stale (rescheduled or
    /// removed) and skipped: cheaper than removing from the middle of a heap.
    heap: BinaryHeap<Reverse<(Instant, GuardId)>>,
    due_of: HashMap<GuardId, Instant>,
}

impl Schedule {
    /// Schedules (or reschedules) guard `id` for `due`.
    pub(crate) fn set(&mut self, id: GuardId, due: Instant) {
        self.due_of.insert(id, due);
        self.heap.push(Reverse((due, id)));
    }

    /// Forgets guard `id`.
    pub(crate) fn remove(&mut self, id: GuardId) {
        self.due_of.remove(&id);
    }

    /// How many guards are scheduled.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.due_of.len()
    }

    /// The earliest due time, if any guard is scheduled.
    pub(crate) fn next_due(&mut self) -> Option<Instant> {
        self.drop_stale();
        self.heap.peek().map(|Reverse((due, _))| *due)
    }

    /// Takes every guard due by `now + slack`: those a tick at `now` renews together. They leave the schedule
    /// until [`set`](Schedule::set) again.
    pub(crate) fn take_due(&mut self, now: Instant, slack: Duration) -> Vec<GuardId> {
        let until = crate::time::later(now, slack);
        let mut due = Vec::new();
        loop {
            self.drop_stale();
            match self.heap.peek() {
                Some(Reverse((at, id))) if *at <= until => {
                    let id = *id;
                    self.heap.pop();
                    self.due_of.remove(&id);
                    due.push(id);
                }
                _ => return due,
            }
        }
    }

    fn drop_stale(&mut self) {
        while let Some(Reverse((at, id))) = self.heap.peek() {
            if self.due_of.get(id) == Some(at) {
                return;
            }
            self.heap.pop();
        }
    }
}

/// When a guard is due for renewal, from the lease it holds: confirmed at `confirmed` (when the round that
/// granted or renewed it started, or later), valid until `valid_until`, relied on until `deadline` (the lease
/// minus the guard's margin). A round timeout before the deadline, so that a renewal whose round takes all of
/// `round_timeout` is still confirmed in time; but no later than a third of what is left of the lease (Redisson's
/// third of the TTL, for a lease as long as a grant gives), and no sooner than a third of what is left before the
/// deadline.
///
/// - From the lease, not from the TTL asked: a lease can be shorter than its TTL by more than the drift allowance
///   (a round that took long: a patient acquisition may take a third of the TTL; a fenced lock's confirmation
///   rounds come after its grant, and its validity counts from the grant's start). A third of the TTL from the
///   moment the guard was made would put the first renewal of such a lease too close to the deadline, or past it:
///   a guard lost with every node answering.
/// - The floor keeps a lease too short for a guard (a TTL that
///   [`hold`](crate::redlock::Request::hold) refuses, as the simulator's guards may have) from being renewed
///   again as soon as each renewal is confirmed: its renewals come a third of its reliable time apart at the
///   most often. For a TTL that `hold` takes, a renewal's lease leaves more than a round between a third of it and
///   the deadline, and the renewals come a third of the lease apart.
pub(crate) fn renewal_due(
    confirmed: Instant,
    valid_until: Instant,
    deadline: Instant,
    round_timeout: Duration,
) -> Instant {
    let third = |until: Instant| {
        crate::time::later(confirmed, until.saturating_duration_since(confirmed) / 3)
    };
    let last = deadline.checked_sub(round_timeout).unwrap_or(confirmed);
    // `third(deadline) <= third(valid_until)`: the deadline is never after the lease's end.
    last.max(third(deadline)).min(third(valid_until))
}

/// When to try again after a renewal that did not decide (nodes down or slow) at `now`: soon (a tenth of the TTL,
/// at least `round_timeout` and at most a second), but no later than the guard's `deadline`, after which it is
/// lost anyway.
pub(crate) fn retry_due(
    now: Instant,
    ttl: Duration,
    round_timeout: Duration,
    deadline: Instant,
) -> Instant {
    let pause = (ttl / 10).clamp(round_timeout, Duration::from_secs(1).max(round_timeout));
    crate::time::later(now, pause).min(deadline)
}

/// How far before the end of its lease a guard counts as lost when no renewal has confirmed it: a tenth of the
/// TTL, at least two round timeouts, at most half the TTL. The margin leaves the holder time to stop its work
/// (a child process to terminate, a write to abandon) before another holder can get the lock.
pub(crate) fn lost_margin(ttl: Duration, round_timeout: Duration) -> Duration {
    (ttl / 10).max(round_timeout.saturating_mul(2)).min(ttl / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn guards_come_due_in_order_and_close_ones_together() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        s.set(1, t0 + ms(300));
        s.set(2, t0 + ms(100));
        s.set(3, t0 + ms(105));
        s.set(4, t0 + ms(900));
        assert_eq!(s.len(), 4);
        assert_eq!(s.next_due(), Some(t0 + ms(100)));
        assert!(s.take_due(t0 + ms(50), ms(10)).is_empty());
        // A tick at 98 ms with 10 ms of slack renews 2 and 3 together.
        assert_eq!(s.take_due(t0 + ms(98), ms(10)), vec![2, 3]);
        assert_eq!(s.next_due(), Some(t0 + ms(300)));
        assert_eq!(s.take_due(t0 + ms(1000), ms(0)), vec![1, 4]);
        assert_eq!((s.len(), s.next_due()), (0, None));
    }

    #[test]
    fn rescheduled_and_removed_guards_leave_no_stale_entries() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        s.set(1, t0 + ms(100));
        s.set(1, t0 + ms(500)); // renewed early: the 100 ms entry is stale
        s.set(2, t0 + ms(200));
        s.remove(2);
        assert_eq!(s.next_due(), Some(t0 + ms(500)));
        assert_eq!(s.take_due(t0 + ms(300), ms(0)), Vec::<GuardId>::new());
        assert_eq!(s.take_due(t0 + ms(500), ms(0)), vec![1]);
    }

    #[test]
    fn renewal_retry_and_margin_follow_the_ttl() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(30);
        // A renewal: a third of the lease it confirmed (the TTL less the drift allowance), from the round's start.
        let valid = t0 + ttl - ms(152);
        let deadline = valid - lost_margin(ttl, ms(50));
        assert_eq!(
            renewal_due(t0, valid, deadline, ms(50)),
            t0 + ms(9_949) + Duration::from_nanos(333_333)
        );
        // Retries: a tenth of the TTL, capped at a second, never past the deadline.
        assert_eq!(retry_due(t0, ttl, ms(50), t0 + ms(5000)), t0 + ms(1000));
        assert_eq!(retry_due(t0, ms(600), ms(50), t0 + ms(5000)), t0 + ms(60));
        assert_eq!(retry_due(t0, ttl, ms(50), t0 + ms(200)), t0 + ms(200));
        assert_eq!(retry_due(t0, ms(100), ms(50), t0 + ms(5000)), t0 + ms(50));
        // The margin: a tenth, at least two rounds, at most half.
        assert_eq!(lost_margin(ttl, ms(50)), Duration::from_secs(3));
        assert_eq!(lost_margin(ms(500), ms(50)), ms(100));
        assert_eq!(lost_margin(ms(150), ms(50)), ms(75));
    }

    #[test]
    fn a_renewal_is_due_from_the_lease_left_not_from_the_ttl() {
        // A lease of 320 ms with the clock check's allowance (55.2 ms): valid 264.8 ms from the grant's start,
        // relied on until 100 ms before that.
        let t0 = Instant::now();
        let (valid, rt) = (t0 + Duration::from_micros(264_800), ms(50));
        let deadline = valid - lost_margin(ms(320), rt);
        // Guarded as soon as granted: a third of the lease.
        let third = Duration::from_micros(264_800) / 3;
        assert_eq!(renewal_due(t0, valid, deadline, rt), t0 + third);
        // Guarded 40 ms after the grant's start (its round took that long): a third of what is left would leave
        // the renewal less than a round before the deadline; it is due a round before it. A third of the TTL from
        // then (146.7 ms) would be past that.
        let due = renewal_due(t0 + ms(40), valid, deadline, rt);
        assert_eq!(due, deadline - rt);
        assert!(due < t0 + ms(40) + ms(320) / 3);
        // Less than a round before the deadline already: a third of the time left before it (a lease this short
        // renewed as soon as confirmed would be renewed in a loop).
        let left = Duration::from_micros(164_800 - 130_000) / 3;
        assert_eq!(
            renewal_due(t0 + ms(130), valid, deadline, rt),
            t0 + ms(130) + left
        );
        // Past the deadline or the lease (a paused holder): at once (the renewal finds it lost), never before the
        // confirmation.
        assert_eq!(renewal_due(t0 + ms(200), valid, deadline, rt), t0 + ms(200));
        assert_eq!(renewal_due(t0 + ms(300), valid, deadline, rt), t0 + ms(300));
    }
}
