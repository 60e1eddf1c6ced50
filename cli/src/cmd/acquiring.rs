//! Taking a lock from the shell (`acquire`, `exec`): interruptible, and loud about an outage.
//!
//! - **Signals are caught before the first round.** SIGINT, SIGTERM, SIGHUP and SIGQUIT while waiting make the
//!   wait give up ([`LockManager::cancel_waits`]); a lock the attempt under way got is released; the exit code is
//!   128 + the signal, as if it had killed muxlock, and no key of this attempt is left on any node.
//! - **An outage is not a held lock.** `--wait` is the time to wait *while another holder has the lock*. When too
//!   few nodes answer for a decision (refused, down, timing out), the first failed attempt is reported on stderr
//!   at once, with each node's outcome (a line each), and muxlock keeps trying for `--outage-wait` (3 s by
//!   default, within `--wait`), with a line every few seconds, then exits 69; the node lines are not repeated
//!   under the final error unless they changed.
//! - **Young nodes are said once.** When the grants not counted by the restart guard would have made the
//!   majority, nothing changes until those nodes count: if that comes within `--outage-wait` (and `--wait`),
//!   muxlock says so and waits for it; otherwise it exits 69 at once with one line saying how long and what to
//!   do. A refused login that decided the round ends it at once (77).
//! - Waiting for a held lock is the library's (woken by releases and at the holder's lease end, no polling), in
//!   slices of a few seconds so that an outage that starts while waiting is seen within a slice.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use muxlock::{Error, LockManager, Request};
use signal_hook::consts::SIGTSTP;
use signal_hook::iterator::{Handle, Signals};

use crate::cmd::Waiting;
use crate::duration;
use crate::exit::{self, CliError};
use crate::output;
use crate::verdict::{self, Cause, NodeLine};

/// The longest one wait of the library lasts before the loop looks at the nodes' state again.
const SLICE: Duration = Duration::from_secs(2);
/// The pause between attempts while no quorum answers.
const OUTAGE_RETRY: Duration = Duration::from_millis(250);
/// How often a line says the outage goes on.
const OUTAGE_LINE: Duration = Duration::from_secs(2);
/// Beyond the time the young nodes' report says they count in: their uptime is read in whole seconds and dated
/// when read, so the guard may count them a little later than said.
const YOUNG_MARGIN: Duration = Duration::from_millis(50);

/// What SIGTSTP (Ctrl-Z) gets while a lock is waited for or held.
const NO_STOP: &str = "Ctrl-Z (SIGTSTP) ignored: a stopped muxlock could not renew the lock, and the command \
                       would be killed at the lease end; Ctrl-C ends it";

/// The signals of a command that takes a lock, caught from its start.
pub struct Interrupts {
    /// The last interrupting signal (0: none).
    last: Arc<AtomicI32>,
    /// Every signal caught but SIGTSTP, in order, for whoever handles them after the acquisition.
    pub rx: Receiver<i32>,
    handle: Handle,
}

impl Interrupts {
    /// Catches `signals` from now on. SIGTSTP, if among them, is refused with a line on stderr. Any other one
    /// cancels the waits of `locks` and wakes the calling thread.
    ///
    /// # Errors
    ///
    /// [`exit::OSERR`] if the handlers cannot be installed.
    pub fn install(signals: &[i32], locks: &LockManager) -> Result<Interrupts, CliError> {
        let mut caught = Signals::new(signals)
            .map_err(|e| CliError::new(exit::OSERR, "os", format!("cannot catch signals: {e}")))?;
        let handle = caught.handle();
        let last = Arc::new(AtomicI32::new(0));
        let (tx, rx) = mpsc::channel();
        let (locks, seen, waker): (LockManager, Arc<AtomicI32>, Thread) =
            (locks.clone(), Arc::clone(&last), thread::current());
        thread::spawn(move || {
            for signal in caught.forever() {
                if signal == SIGTSTP {
                    output::note(NO_STOP);
                    continue;
                }
                seen.store(signal, Ordering::Release);
                locks.cancel_waits();
                waker.unpark();
                // Nobody listens once the command that installed it is done: keep catching regardless.
                let _ = tx.send(signal);
            }
        });
        Ok(Interrupts { last, rx, handle })
    }

    /// The signal that interrupted, if one did.
    pub fn interrupted(&self) -> Option<i32> {
        Some(self.last.load(Ordering::Acquire)).filter(|&s| s != 0)
    }

    /// Sleeps for `d`, or less if a signal interrupts.
    fn sleep(&self, d: Duration) {
        let until = Instant::now() + d;
        while self.interrupted().is_none() {
            let now = Instant::now();
            if now >= until {
                return;
            }
            thread::park_timeout(until - now);
        }
    }

    /// The error for an interrupt while taking `resource`: exit code 128 + the signal.
    pub fn error(signal: i32, resource: &str) -> CliError {
        CliError::new(
            u8::try_from(128 + signal).unwrap_or(exit::SOFTWARE),
            "interrupted",
            format!(
                "interrupted by {} while waiting for lock {resource:?}: gave up; nothing is held",
                signal_name(signal)
            ),
        )
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        self.handle.close();
    }
}

/// `SIGINT` for 2, and so on.
pub fn signal_name(signal: i32) -> String {
    signal_hook::low_level::signal_name(signal)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("signal {signal}"))
}

/// `request` waiting up to `slice` (zero: one attempt), as [`acquire`] hands its attempts slices: the one way
/// the commands ask, `--nonblock` included.
pub fn within(request: Request<'_>, slice: Duration) -> Request<'_> {
    match slice.is_zero() {
        true => request.once(),
        false => request.wait(slice),
    }
}

/// Takes `resource` with `attempt(wait)` (one library call that waits up to `wait`; zero: one attempt: see
/// [`within`]), as the module docs say. `give_back` releases a lock that arrived after an interrupt.
///
/// # Errors
///
/// The conflict code when the lock stays held for `--wait`; 69 when no quorum answered for `--outage-wait`;
/// 128 + N after signal N; the codes of [`CliError::lock`] otherwise.
pub fn acquire<T>(
    resource: &str,
    waiting: &Waiting,
    interrupts: &Interrupts,
    mut attempt: impl FnMut(Duration) -> Result<T, Error>,
    give_back: impl FnOnce(T),
) -> Result<T, CliError> {
    let conflict = waiting.conflict_exit_code;
    let start = Instant::now();
    let until = start
        .checked_add(waiting.max_wait())
        .unwrap_or(start + Duration::from_secs(86_400 * 365));
    // (since when, when the last line was printed)
    let mut outage: Option<(Instant, Instant)> = None;
    // The node lines printed on stderr last (each failure's are printed once, not again under the final error).
    let mut shown: Option<Vec<NodeLine>> = None;
    let mut young_waited = false;
    let mut held = false;
    loop {
        if let Some(signal) = interrupts.interrupted() {
            return Err(Interrupts::error(signal, resource));
        }
        let now = Instant::now();
        // After a "held", wait in the library (woken by the release); otherwise (first try, outage) one attempt.
        let slice = match held {
            true => until.saturating_duration_since(now).min(SLICE),
            false => Duration::ZERO,
        };
        let result = attempt(slice);
        if let Some(signal) = interrupts.interrupted() {
            if let Ok(lock) = result {
                give_back(lock);
            }
            return Err(Interrupts::error(signal, resource));
        }
        let now = Instant::now();
        let e = match result {
            Ok(lock) => {
                if let Some((since, _)) = outage {
                    output::note(&format!(
                        "a quorum answered again after {}: acquired {resource:?}",
                        duration::human(now - since)
                    ));
                }
                return Ok(lock);
            }
            Err(e) => e,
        };
        let cause = verdict::cause(&e);
        match &e {
            Error::Held(_) => {
                outage = None;
                held = true;
                if now >= until {
                    return Err(CliError::lock(&e, conflict));
                }
            }
            Error::Quorum(report) if cause == Some(Cause::Young) => {
                // Nothing changes until the young nodes count: wait for that once, if it comes within
                // --outage-wait (and --wait), saying so; else the one explanation, at once.
                held = false;
                let limit = waiting.outage_wait;
                let (since, _) = *outage.get_or_insert((now, now));
                let wait = report.restart_wait().unwrap_or_default() + YOUNG_MARGIN;
                let mut error = CliError::lock(&e, conflict);
                let fits = now + wait <= until && now.duration_since(since) + wait <= limit;
                if young_waited || !fits {
                    error.nodes_shown = shown.as_ref() == Some(&error.nodes);
                    return Err(error);
                }
                output::note_with_nodes(
                    &format!(
                        "{}; waiting {} for them to count (within --outage-wait {})",
                        error.message,
                        duration::human(wait),
                        duration::human(limit)
                    ),
                    &error.nodes,
                );
                shown = Some(error.nodes);
                young_waited = true;
                interrupts.sleep(wait);
            }
            Error::Quorum(_) if cause != Some(Cause::Auth) => {
                held = false;
                let limit = waiting.outage_wait;
                let (since, last_line) = *outage.get_or_insert((now, now));
                let out_of_time = now >= until || now.duration_since(since) >= limit;
                let mut error = CliError::lock(&e, conflict);
                if out_of_time {
                    error.nodes_shown = shown.as_ref() == Some(&error.nodes);
                    return Err(outage_error(error, since, now, limit));
                }
                if since == last_line && now == since {
                    output::note_with_nodes(
                        &format!(
                            "{}; trying again for up to --outage-wait {}",
                            error.message,
                            duration::human(limit)
                        ),
                        &error.nodes,
                    );
                    shown = Some(error.nodes);
                } else if now.duration_since(last_line) >= OUTAGE_LINE {
                    output::note(&format!(
                        "still no quorum after {} ({})",
                        duration::human(now.duration_since(since)),
                        error.message
                    ));
                    outage = Some((since, now));
                }
                interrupts.sleep(OUTAGE_RETRY.min(until.saturating_duration_since(now)));
            }
            _ => return Err(CliError::lock(&e, conflict)),
        }
    }
}

/// The error when no quorum answered: the round's (with each node's outcome), and for how long.
fn outage_error(mut error: CliError, since: Instant, now: Instant, limit: Duration) -> CliError {
    if now > since {
        error.message = format!(
            "{} (no quorum for {}; --outage-wait {})",
            error.message,
            duration::human(now - since),
            duration::human(limit)
        );
    }
    error
}
