//! Instant arithmetic that cannot panic: durations come from users (timeouts, windows), and `Instant + Duration`
//! panics on overflow.

use std::time::{Duration, Instant};

/// `t + d`, or as far after `t` as the platform's `Instant` reaches (a century suffices for every deadline).
pub(crate) fn later(t: Instant, d: Duration) -> Instant {
    t.checked_add(d)
        .or_else(|| t.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_durations_saturate() {
        let now = Instant::now();
        assert_eq!(
            later(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
        assert!(later(now, Duration::MAX) > now + Duration::from_secs(3600 * 24 * 365));
    }
}
