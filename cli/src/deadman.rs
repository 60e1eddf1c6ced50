//! The dead-man's switch of `muxlock exec`: the command must not outlive the lease, even if muxlock is killed
//! (SIGKILL, the OOM killer) or stopped (SIGSTOP).
//!
//! Two hidden subcommands of the `muxlock` binary, which `exec` runs by re-executing itself (`/proc/self/exe`):
//!
//! - `muxlock __reaper --kill-at NS`: started first, as the leader of a new process group, which the command then
//!   joins. It reads kill deadlines from its stdin (one decimal number a line: `CLOCK_BOOTTIME` nanoseconds, the
//!   clock that keeps counting through a suspend, so that a lease that ran out while the machine slept is over when
//!   it wakes) and sends SIGKILL to its whole group, itself included:
//!   - when the last deadline passes (muxlock sends a later one after each confirmed renewal; a stopped or hung
//!     muxlock sends none);
//!   - at once when its stdin ends: muxlock is gone (only muxlock holds the pipe's write end: it is close-on-exec,
//!     so the command never inherits it).
//!
//!   It catches SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN and SIGTTOU and does nothing with them: muxlock
//!   forwards signals to the group, and they are meant for the command. Being in the group, it keeps the group's
//!   id from being reused by an unrelated process while it waits, so its SIGKILL can only reach the command's
//!   processes (and itself). Once muxlock is done with the command, muxlock kills the group, the reaper with it.
//! - `muxlock __run --parent PID -- COMMAND ARGS`: the command's first process. It asks the kernel for SIGKILL
//!   when its parent (muxlock's main thread) dies (`PR_SET_PDEATHSIG`), checks that the parent is still the one
//!   that started it, then replaces itself with COMMAND (execvp): the command's leader dies with muxlock even if the
//!   reaper was killed too. (The death signal is cleared by the kernel when a set-user-ID program is executed.)
//!
//! What this cannot guard: SIGKILL to the reaper *and* muxlock while the command's group lives on (then the leader
//! still dies, from its death signal, but not the rest of its group); processes that leave the group (`setsid`,
//! `setpgid`: daemons); every process of the tree stopped at once (a VM paused, a cgroup frozen) past the lease end.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use rustix::process::{Pid, Signal, getpgrp, getpid, getppid, kill_current_process_group};
use rustix::time::{ClockId, clock_gettime};

use crate::exit::{self, CliError};
use crate::output;

/// What the reaper prints before it is ready; muxlock waits for it before it starts the command.
const READY: &str = "ready";

/// How long muxlock waits for the reaper to say it is ready.
const READY_LIMIT: Duration = Duration::from_secs(10);

/// The reaper looks at the clock at least this often: `CLOCK_BOOTTIME` moves on in a suspend, which a timed wait
/// on the monotonic clock does not see.
const TICK: Duration = Duration::from_millis(100);

/// `CLOCK_BOOTTIME` now, in nanoseconds.
fn boottime_ns() -> u128 {
    let t = clock_gettime(ClockId::Boottime);
    u128::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u128::try_from(t.tv_nsec).unwrap_or(0)
}

/// `at` (an instant of this process' monotonic clock) as `CLOCK_BOOTTIME` nanoseconds, which another process can
/// compare with its own clock. An instant already past is now.
pub fn boottime_of(at: Instant) -> u128 {
    boottime_ns() + at.saturating_duration_since(Instant::now()).as_nanos()
}

/// The hidden `__reaper` subcommand.
#[derive(ClapArgs, Debug)]
pub struct ReaperArgs {
    /// The first kill deadline, `CLOCK_BOOTTIME` nanoseconds.
    #[arg(long)]
    kill_at: u128,
}

/// Why the reaper reads no more deadlines.
enum Heard {
    Deadline(u128),
    End,
}

/// The reaper's life (see the module docs). Returns an exit code only if it could not do its job; otherwise it
/// ends by its own SIGKILL.
pub fn reaper(args: &ReaperArgs) -> u8 {
    // Its group must be its own: killing "the current group" of a process still in muxlock's group would kill the
    // user's shell job. `exec` starts it with a group of its own; anything else is refused.
    if getpgrp() != getpid() {
        output::note("__reaper: not the leader of its own process group; refusing to run");
        return exit::USAGE;
    }
    let ignored = Arc::new(AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGQUIT,
        signal_hook::consts::SIGTSTP,
        signal_hook::consts::SIGTTIN,
        signal_hook::consts::SIGTTOU,
    ] {
        if let Err(e) = signal_hook::flag::register(signal, Arc::clone(&ignored)) {
            output::note(&format!("__reaper: cannot catch signal {signal}: {e}"));
            return exit::OSERR;
        }
    }
    let mut out = io::stdout();
    if writeln!(out, "{READY}").and_then(|()| out.flush()).is_err() {
        // muxlock is gone already: nothing joined the group yet.
        return exit::OK;
    }
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(io::stdin().lock()).lines() {
            let Ok(line) = line else { break };
            if let Ok(ns) = line.trim().parse::<u128>() {
                if tx.send(Heard::Deadline(ns)).is_err() {
                    return;
                }
            }
        }
        let _ = tx.send(Heard::End);
    });
    let mut kill_at = args.kill_at;
    let why = loop {
        let now = boottime_ns();
        if now >= kill_at {
            break "the lease of the command's lock ended with no renewal confirmed to muxlock's reaper \
                   (muxlock stopped or hung?)";
        }
        let left = Duration::from_nanos(u64::try_from(kill_at - now).unwrap_or(u64::MAX));
        match rx.recv_timeout(left.min(TICK)) {
            Ok(Heard::Deadline(ns)) => kill_at = ns,
            Ok(Heard::End) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                break "muxlock ended while the command ran (killed?)";
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    };
    // The kill must not wait on a terminal that blocks writes (a stopped reader, TOSTOP): the note gets a moment
    // in a thread of its own, the kill comes regardless.
    let (done_tx, done_rx) = mpsc::channel();
    thread::spawn(move || {
        output::note(&format!(
            "reaper: {why}: SIGKILL to the command's process group"
        ));
        let _ = done_tx.send(());
    });
    let _ = done_rx.recv_timeout(Duration::from_millis(100));
    let _ = kill_current_process_group(Signal::KILL);
    exit::SOFTWARE
}

/// The hidden `__run` subcommand: the command's first process.
#[derive(ClapArgs, Debug)]
pub struct RunArgs {
    /// The PID of the muxlock that started it.
    #[arg(long)]
    parent: i32,

    /// The command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<std::ffi::OsString>,
}

/// Sets the parent-death signal and becomes the command; returns only if it cannot (126, or 127 if not found, as
/// env(1)).
pub fn run_command(args: &RunArgs) -> u8 {
    let Some((program, rest)) = args.command.split_first() else {
        return exit::USAGE;
    };
    if let Err(e) = rustix::process::set_parent_process_death_signal(Some(Signal::KILL)) {
        output::note(&format!("cannot tie the command to muxlock's life: {e}"));
        return exit::OSERR;
    }
    // muxlock may have died between the fork and the prctl: then no signal will come.
    if getppid().map(Pid::as_raw_nonzero).map(i32::from) != Some(args.parent) {
        return exit::LOST;
    }
    let e = Command::new(program).args(rest).exec();
    output::note(&format!("cannot run {}: {e}", program.to_string_lossy()));
    if e.kind() == io::ErrorKind::NotFound {
        exit::NOT_FOUND
    } else {
        exit::CANNOT_RUN
    }
}

/// muxlock's side of the reaper: its process, the leader of the command's group.
pub struct Reaper {
    pub child: Child,
}

impl Reaper {
    /// Starts the reaper with its first kill deadline, and waits until it is ready; the other end of its
    /// deadline pipe.
    ///
    /// # Errors
    ///
    /// [`exit::OSERR`] if it cannot be started or does not get ready (it is killed then).
    pub fn start(kill_at: Instant) -> Result<(Reaper, DeadlineSender), CliError> {
        let os = |what: String| CliError::new(exit::OSERR, "os", what);
        let mut child = Command::new("/proc/self/exe")
            .arg("__reaper")
            .arg("--kill-at")
            .arg(boottime_of(kill_at).to_string())
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| os(format!("cannot start muxlock's reaper: {e}")))?;
        let (Some(deadlines), Some(mut out)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(os("cannot talk to muxlock's reaper".into()));
        };
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut buf = [0u8; 16];
            let mut got = Vec::new();
            while !got.ends_with(b"\n") && got.len() < 64 {
                match out.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let _ = tx.send(got);
        });
        match rx.recv_timeout(READY_LIMIT) {
            Ok(got) if got.starts_with(READY.as_bytes()) => {
                Ok((Reaper { child }, DeadlineSender { pipe: deadlines }))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                Err(os(
                    "muxlock's reaper did not start (it guards the command against muxlock's death)".into(),
                ))
            }
        }
    }

    /// The process group the command joins: the reaper's.
    pub fn group(&self) -> Option<Pid> {
        i32::try_from(self.child.id()).ok().and_then(Pid::from_raw)
    }
}

/// Sends kill deadlines to the reaper.
pub struct DeadlineSender {
    pipe: ChildStdin,
}

impl DeadlineSender {
    /// The reaper's new kill deadline.
    ///
    /// # Errors
    ///
    /// The pipe's: the reaper is gone.
    pub fn send(&mut self, kill_at: Instant) -> io::Result<()> {
        writeln!(self.pipe, "{}", boottime_of(kill_at))?;
        self.pipe.flush()
    }
}
