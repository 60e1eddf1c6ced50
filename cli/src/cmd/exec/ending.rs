//! How an `exec` run ends: the kill deadline under a guard, the exit code of the command's status, notes on
//! stderr that never block a signal, and the reaper's end.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use muxlock::Lost;

use crate::deadman::Reaper;
use crate::exit;
use crate::output;

/// The last moment the command's process group may live under a guard whose [deadline](muxlock::Guard::deadline)
/// is `deadline`: the end of the lease minus half the guard's margin. (The guard's deadline is that end minus the
/// margin, documented as a tenth of the TTL, at least two round timeouts, at most half the TTL; SIGTERM comes at
/// the guard's deadline, so the command has at least half the margin between TERM and KILL.)
pub(super) fn kill_deadline(deadline: Instant, ttl: Duration, round_timeout: Duration) -> Instant {
    let margin = (ttl / 10).max(round_timeout * 2).min(ttl / 2);
    deadline + margin / 2
}

/// Notes written to stderr by a thread of their own, in order, so that a blocked stderr never delays a signal.
pub(super) struct Notes {
    tx: mpsc::Sender<String>,
    done: mpsc::Receiver<()>,
}

impl Notes {
    pub(super) fn start() -> Notes {
        let (tx, rx) = mpsc::channel::<String>();
        let (done_tx, done) = mpsc::channel();
        thread::spawn(move || {
            for note in rx {
                output::note(&note);
            }
            let _ = done_tx.send(());
        });
        Notes { tx, done }
    }

    pub(super) fn say(&self, note: String) {
        let _ = self.tx.send(note);
    }

    /// Waits (at most 2 s: stderr may be blocked for good) until the notes said so far are written.
    pub(super) fn finish(self) {
        drop(self.tx);
        let _ = self.done.recv_timeout(Duration::from_secs(2));
    }
}

/// Reaps the reaper once its group was killed (bounded: SIGKILL may wait for a process in the kernel).
pub(super) fn finish_reaper(mut reaper: Reaper) {
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        match reaper.child.try_wait() {
            Ok(None) => thread::sleep(Duration::from_millis(5)),
            _ => return,
        }
    }
}

/// The exit code for the command's status: its code, or 128 + the signal that killed it.
pub(super) fn code_of(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(exit::SOFTWARE),
        (None, Some(signal)) => u8::try_from((128 + signal) & 0xff).unwrap_or(exit::SOFTWARE),
        (None, None) => exit::SOFTWARE,
    }
}

pub(super) fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => format!("ended ({status})"),
    }
}

/// Why the lock was lost, without the per-node report (printed already when it happened).
pub(super) fn short(lost: &Lost) -> &'static str {
    match lost {
        Lost::Taken(_) => "too few nodes still held it",
        Lost::Down(_) => "too many of its nodes went down",
        Lost::Clock(_) => "too many of its nodes' clocks disagreed with this host's",
        Lost::Expired(_) => "no renewal was confirmed before its deadline",
        Lost::Released => "released",
        _ => "lost",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kill_deadline_is_before_the_lease_end_and_after_the_guards_deadline() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        // --ttl 10s, 200ms rounds: margin 1s; SIGTERM at the lease end - 1s, SIGKILL by the end - 0.5s.
        assert_eq!(kill_deadline(t0, ms(10_000), ms(200)), t0 + ms(500));
        // --ttl 3s: margin 400ms (two round timeouts).
        assert_eq!(kill_deadline(t0, ms(3_000), ms(200)), t0 + ms(200));
        // Never more than a quarter of the TTL after the guard's deadline (margin at most half of it).
        assert_eq!(kill_deadline(t0, ms(1_000), ms(400)), t0 + ms(250));
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(code_of(ExitStatus::from_raw(0)), 0);
        assert_eq!(code_of(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(code_of(ExitStatus::from_raw(15)), 128 + 15);
        assert_eq!(code_of(ExitStatus::from_raw(9)), 137);
    }
}
