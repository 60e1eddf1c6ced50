//! `muxlock exec RESOURCE -- COMMAND [ARGS...]`: runs a command under the lock, kept alive while it runs.
//!
//! 1. Acquire: [`LockManager::hold_wait`] waits up to `--wait` without polling (woken by releases and by the
//!    holder's lease end; see its docs), or one attempt with `-n` ([`LockManager::try_hold`]). A conflict exits
//!    with `-E`'s code (default 1, as flock(1)).
//! 2. Spawn `COMMAND ARGS` directly (no shell) in its own process group, with `MUXLOCK_RESOURCE`, `MUXLOCK_VALUE`
//!    and `MUXLOCK_DEADLINE_MS` in its environment. It cannot be run: 126, or 127 if not found (as env(1)); the
//!    lock is released.
//! 3. While it runs, the [`Guard`] renews the lease, and three threads feed one channel: the
//!    child's exit, the guard's lost signal ([`LostWatch::wait_lost`](muxlock::LostWatch::wait_lost): at once
//!    when the key is taken or its nodes are down, at the latest at the guard's deadline, which is before the
//!    lease ends), and SIGINT/SIGTERM/SIGHUP/SIGQUIT sent to muxlock.
//!    - A signal is forwarded to the command's process group (the terminal's Ctrl-C reaches muxlock only, since
//!      the command is in a group of its own).
//!    - The lock lost: SIGTERM to the process group and a line on stderr saying why; SIGKILL if it has not exited
//!      `--kill-after` later. muxlock then exits [`exit::LOST`] (75).
//! 4. When the command exits: release the lock, and exit with its code, or 128 + N if signal N killed it.
//!
//! The command is not the foreground process group of a terminal: a command that reads the terminal is stopped
//! (SIGTTIN), as under `setsid`. Run interactive programs under flock(1) or give them their input otherwise.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use clap::Args as ClapArgs;
use muxlock::{Guard, LockManager, Lost};
use rustix::process::{Pid, Signal, kill_process_group};
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::cmd::{Waiting, ttl};
use crate::duration;
use crate::exit::{self, CliError};
use crate::nodes::Conn;
use crate::output;
use crate::state::unix_ms;

/// Run a command while holding a lock, kept alive while it runs.
///
/// Acquires RESOURCE (waiting up to --wait, without polling), runs COMMAND with its ARGS directly (no shell) in its
/// own process group, extends the lease while it runs, and releases when it exits. Exits with the command's code,
/// or 128+N if signal N killed it. If the lock is lost while the command runs, the command's process group gets
/// SIGTERM before the lease ends, SIGKILL after --kill-after, and muxlock exits 75. SIGINT, SIGTERM, SIGHUP and
/// SIGQUIT sent to muxlock are forwarded to the command. The command sees MUXLOCK_RESOURCE, MUXLOCK_VALUE (the
/// lock's value) and MUXLOCK_DEADLINE_MS (Unix time in ms until which the lock was certain when the command
/// started; renewals move it later).
#[derive(ClapArgs)]
#[command(
    after_help = "Examples:\n  muxlock exec --ttl 30s nightly-report -- ./make-report --since yesterday\n  \
                  muxlock exec -n backup -- sh -c 'pg_dump db | gzip > db.gz'   # a shell only if you ask\n\n\
                  Exit codes: the command's; 128+N if signal N killed it; 1 (or -E N) the lock is held; 75 the \
                  lock was lost while it ran; 126 cannot run it; 127 not found; 69 no quorum; 64 usage; 78 config."
)]
pub struct Args {
    /// The resource to lock (the Redis key).
    #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub resource: String,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,

    /// The lease; the guard renews it (at a third of it) while the command runs, so it is also how long the lock
    /// outlives muxlock if muxlock dies.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = ttl)]
    pub ttl: Duration,

    #[command(flatten)]
    pub waiting: Waiting,

    /// After SIGTERM to a command whose lock was lost, how long to wait before SIGKILL.
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = duration::parse)]
    pub kill_after: Duration,

    #[command(flatten)]
    pub conn: Conn,
}

/// What the main loop hears about.
enum Event {
    /// The command exited (its leader: the process muxlock started).
    Exited(io::Result<ExitStatus>),
    /// The guard says the lock can no longer be relied on (or it was released).
    Lost,
    /// muxlock received this signal.
    Signal(i32),
}

/// Runs the command under the lock; returns the exit code.
///
/// # Errors
///
/// The conflict code when the lock is held; [`exit::LOST`] when it was lost while the command ran (after the
/// command ended); [`exit::CANNOT_RUN`] / [`exit::NOT_FOUND`] when the command cannot be started; the codes of
/// [`CliError::lock`] for the acquisition.
pub fn run(args: &Args) -> Result<u8, CliError> {
    let locks = args.conn.manager(0)?;
    let guard = acquire(&locks, args)?;
    let Some((program, rest)) = args.command.split_first() else {
        return Err(CliError::usage("no command given after --"));
    };
    let deadline_ms =
        unix_ms(SystemTime::now() + guard.deadline().saturating_duration_since(Instant::now()));
    // Signals are caught from here on: before, no lock is held and the default (muxlock ends) is right.
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT])
        .map_err(|e| CliError::new(exit::OSERR, "os", format!("cannot catch signals: {e}")))?;
    let mut child = match Command::new(program)
        .args(rest)
        .process_group(0)
        .env("MUXLOCK_RESOURCE", &args.resource)
        .env("MUXLOCK_VALUE", guard.value())
        .env("MUXLOCK_DEADLINE_MS", deadline_ms.to_string())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            let code = if e.kind() == io::ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::CANNOT_RUN
            };
            drop(guard); // releases the lock
            return Err(CliError::new(
                code,
                "command",
                format!("cannot run {}: {e}", program.to_string_lossy()),
            ));
        }
    };
    let pid = child.id();
    let group = i32::try_from(pid).ok().and_then(Pid::from_raw);
    let kill_group = |signal: Signal| {
        if let Some(group) = group {
            let _ = kill_process_group(group, signal);
        }
    };

    let (tx, rx) = mpsc::channel();
    {
        let tx = tx.clone();
        thread::spawn(move || {
            let _ = tx.send(Event::Exited(child.wait()));
        });
    }
    {
        let tx = tx.clone();
        let watch = guard.watch();
        thread::spawn(move || {
            while !watch.wait_lost(Duration::from_secs(3600)) {}
            let _ = tx.send(Event::Lost);
        });
    }
    let handle = signals.handle();
    thread::spawn(move || {
        for signal in signals.forever() {
            if tx.send(Event::Signal(signal)).is_err() {
                break;
            }
        }
    });

    let mut lost: Option<Lost> = None;
    let mut kill_at: Option<Instant> = None;
    let status = loop {
        let event = match kill_at {
            Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(event) => event,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    output::note(&format!(
                        "the command did not exit within --kill-after {} of SIGTERM: SIGKILL to its process \
                         group",
                        duration::human(args.kill_after)
                    ));
                    kill_group(Signal::KILL);
                    kill_at = None;
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break None,
            },
            None => match rx.recv() {
                Ok(event) => event,
                Err(_) => break None,
            },
        };
        match event {
            Event::Exited(status) => break Some(status),
            Event::Lost if lost.is_none() => {
                let why = guard.lost().unwrap_or(Lost::Expired(
                    None, /* cannot happen: the watch said lost */
                ));
                output::note(&format!(
                    "lock {:?} lost while the command ran: {why}; SIGTERM to its process group{}",
                    args.resource,
                    if args.kill_after.is_zero() {
                        String::new()
                    } else {
                        format!(", SIGKILL in {}", duration::human(args.kill_after))
                    }
                ));
                kill_group(Signal::TERM);
                // A --kill-after too long for the clock means never.
                kill_at = Instant::now().checked_add(args.kill_after);
                lost = Some(why);
            }
            Event::Lost => {}
            Event::Signal(signal) => {
                if let Some(signal) = Signal::from_named_raw(signal) {
                    kill_group(signal);
                }
            }
        }
    };
    handle.close();

    let lock_was_lost = lost.is_some();
    let released = if lock_was_lost {
        drop(guard); // a compare-and-delete: never deletes another holder's key
        None
    } else {
        Some(guard.release())
    };
    let status = match status {
        Some(Ok(status)) => status,
        Some(Err(e)) => {
            return Err(CliError::new(
                exit::OSERR,
                "os",
                format!("cannot wait for the command (pid {pid}): {e}"),
            ));
        }
        None => {
            return Err(CliError::new(
                exit::SOFTWARE,
                "internal",
                "lost track of the command",
            ));
        }
    };
    if let Some(why) = lost {
        return Err(CliError::new(
            exit::LOST,
            "lost",
            format!(
                "the command was stopped because lock {:?} was lost ({}): it {}",
                args.resource,
                short(&why),
                describe(status)
            ),
        ));
    }
    if let Some(Err(e)) = released {
        output::note(&format!(
            "could not confirm the release of {:?} ({e}): the lock ends with its lease",
            args.resource
        ));
    }
    Ok(code_of(status))
}

/// The lock, under a guard: waiting up to `--wait`, or one attempt.
fn acquire(locks: &LockManager, args: &Args) -> Result<Guard, CliError> {
    let conflict = args.waiting.conflict_exit_code;
    let wait = args.waiting.max_wait();
    if wait.is_zero() {
        return match locks.try_hold(&args.resource, args.ttl) {
            Ok(Some(guard)) => Ok(guard),
            Ok(None) => Err(CliError::new(
                conflict,
                "conflict",
                format!("lock {:?} is held by another holder", args.resource),
            )),
            Err(e) => Err(CliError::lock(&e, conflict)),
        };
    }
    locks
        .hold_wait(&args.resource, args.ttl, wait)
        .map_err(|e| CliError::lock(&e, conflict))
}

/// The exit code for the command's status: its code, or 128 + the signal that killed it.
fn code_of(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(exit::SOFTWARE),
        (None, Some(signal)) => u8::try_from((128 + signal) & 0xff).unwrap_or(exit::SOFTWARE),
        (None, None) => exit::SOFTWARE,
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => format!("ended ({status})"),
    }
}

/// Why the lock was lost, without the per-node report (printed already when it happened).
fn short(lost: &Lost) -> &'static str {
    match lost {
        Lost::Taken(_) => "too few nodes still held it",
        Lost::Down(_) => "too many of its nodes went down",
        Lost::Expired(_) => "no renewal was confirmed before its deadline",
        Lost::Released => "released",
        _ => "lost",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(code_of(ExitStatus::from_raw(0)), 0);
        assert_eq!(code_of(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(code_of(ExitStatus::from_raw(15)), 128 + 15);
        assert_eq!(code_of(ExitStatus::from_raw(9)), 137);
    }
}
