//! The subcommands, one module each, and the options several of them share.
//!
//! Each module has an `Args` (clap derive) and a `run`.

pub mod acquire;
pub mod acquiring;
pub mod bench;
pub mod cluster;
pub mod demo;
pub mod exec;
pub mod extend;
pub mod release;
pub mod status;

use std::time::Duration;

use clap::Args;
use muxlock::Config;

use crate::duration;
use crate::exit;

/// How to wait while another holder has the lock (`acquire`, `exec`).
#[derive(Args, Clone, Debug)]
pub struct Waiting {
    /// How long to wait while the lock is held; 10 = 10s.
    ///
    /// While another holder has the lock, muxlock waits for it this long, then gives up with the conflict code
    /// (-E). The wait is woken by the holder's release or lease end, not polling. A bare number is seconds, as
    /// flock's -w; 500ms, 2m, 1h work too.
    #[arg(short = 'w', long, value_name = "DUR", default_value = "30s", value_parser = duration::parse_wait)]
    pub wait: Duration,

    /// How long to retry while too few nodes answer.
    ///
    /// An outage (nodes refusing, down, timing out: too few answer for a decision) is not a held lock: the first
    /// failure is reported at once with each node's outcome, a line follows every 2s, and muxlock exits 69 after
    /// this long (within --wait), not after all of --wait unless you ask (--outage-wait 30s). A bare number is
    /// seconds.
    #[arg(long, value_name = "DUR", default_value = "3s", value_parser = duration::parse_wait)]
    pub outage_wait: Duration,

    /// Do not wait: one attempt (same as --wait 0).
    ///
    /// If the lock is held, the conflict code at once.
    #[arg(short = 'n', long)]
    pub nonblock: bool,

    /// The exit code when another holder has the lock.
    ///
    /// Also when it stays held for all of --wait. The default, 1, is flock's.
    #[arg(short = 'E', long, value_name = "N", default_value_t = exit::CONFLICT)]
    pub conflict_exit_code: u8,
}

impl Waiting {
    /// How long to wait for the lock: `--wait`, or zero with `--nonblock` (one attempt).
    pub fn max_wait(&self) -> Duration {
        if self.nonblock {
            Duration::ZERO
        } else {
            self.wait
        }
    }
}

/// Parses a lease: a duration from 10 ms to a year.
pub fn ttl(s: &str) -> Result<Duration, String> {
    let d = duration::parse(s)?;
    if d < Duration::from_millis(10) {
        return Err(format!(
            "{s:?} is too short for a lease: at least 10ms (the clock-drift allowance alone is 2ms)"
        ));
    }
    if d > Config::MAX_TTL {
        return Err(format!("{s:?} is longer than the longest lease, a year"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonblock_means_no_wait() {
        let waiting = |wait: u64, nonblock| Waiting {
            wait: Duration::from_millis(wait),
            nonblock,
            conflict_exit_code: 1,
            outage_wait: Duration::from_secs(3),
        };
        assert_eq!(waiting(30_000, false).max_wait(), Duration::from_secs(30));
        assert_eq!(waiting(30_000, true).max_wait(), Duration::ZERO);
    }

    #[test]
    fn leases_are_bounded() {
        assert_eq!(ttl("10ms"), Ok(Duration::from_millis(10)));
        assert!(ttl("5ms").unwrap_err().contains("too short"));
        assert!(ttl("0").unwrap_err().contains("too short"));
        assert!(ttl("9000h").unwrap_err().contains("a year"));
        assert!(ttl("30").unwrap_err().contains("no unit"));
    }
}
