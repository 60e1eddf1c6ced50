//! `muxlock exec RESOURCE COMMAND [ARGS...]`: runs a command under the lock, kept alive while it runs.
//!
//! **The guarantee: no process of the command's process group runs past the end of the lease it holds** — the
//! group is SIGKILLed before the lease ends (at the end minus half the guard's margin) unless a renewal was
//! confirmed, whether muxlock is alive, stopped or killed. Its limits are in [`crate::deadman`].
//!
//! 1. Signals are caught from the start (SIGINT, SIGTERM, SIGHUP, SIGQUIT; SIGTSTP is refused with a line: a
//!    stopped muxlock cannot renew). Acquire ([`acquiring`]): one request, [`LockManager::request`](muxlock::LockManager::request)`(RESOURCE)`
//!    `.ttl(--ttl)`, `.fenced()` with `--fenced`, held by a guard, waiting up to `--wait` without polling (woken
//!    by releases and the holder's lease end; `--nonblock`: one attempt); an interrupt gives up (128 + N, nothing held); an outage is said at once and
//!    ends in 69 after `--outage-wait`. A conflict exits with `-E`'s code (default 1, as flock(1)).
//! 2. Start the reaper (`muxlock __reaper`, the dead-man's switch, leader of a new process group), then the command
//!    in that group through `muxlock __run` (parent-death signal, then execvp: no shell), with
//!    `MUXLOCK_RESOURCE`, `MUXLOCK_VALUE`, `MUXLOCK_DEADLINE_MS` and, with `--fenced`, `MUXLOCK_FENCE_TOKEN`. It
//!    cannot be run: 126, or 127 if not found (as env(1)).
//! 3. While it runs, the [`Guard`](muxlock::Guard) renews the lease; each renewal's new kill deadline goes to the
//!    reaper. Threads feed one channel: the leader's exit, the guard's lost signal, the reaper's end, and signals
//!    (forwarded to the group; the reaper ignores them).
//!    - The lock lost: SIGTERM to the group and a line on stderr saying why; SIGKILL `--kill-after` later, or at
//!      the kill deadline if that comes first; 100 ms later at the most when the key is gone or taken on enough
//!      nodes (another client may hold it already). muxlock then exits [`exit::LOST`] (75).
//!    - The kill deadline passed with no loss heard (muxlock starved): SIGKILL all the same.
//! 4. When the leader exits, whatever it left in its group is SIGKILLed (with a line naming the processes)
//!    *before* the lock is released or given up; then muxlock exits with the command's code, or 128 + N if signal N
//!    killed it.
//!
//! The command is not the foreground process group of a terminal: a command that reads the terminal is stopped
//! (SIGTTIN), as under `setsid`. Run interactive programs under flock(1) or give them their input otherwise.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use clap::Args as ClapArgs;
use muxlock::Lost;
use rustix::process::{Pid, Signal, kill_process_group};
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGTSTP};

use crate::cmd::acquiring::{self, Interrupts};
use crate::cmd::{Waiting, ttl};
use crate::deadman::Reaper;
use crate::duration;
use crate::exit::{self, CliError};
use crate::nodes::Conn;
use crate::output;
use crate::procs;
use crate::state::unix_ms;
use crate::verdict::Mark;

mod ending;

use ending::{Notes, code_of, describe, finish_reaper, kill_deadline, short};

/// Run a command while holding a lock, kept alive while it runs.
///
/// Acquires RESOURCE (waiting up to --wait, without polling), runs COMMAND with its ARGS directly (no shell) in a
/// process group of its own, renews the lease while it runs, and releases when it exits. Exits with the command's
/// code, or 128+N if signal N killed it.
///
/// The command line is flock's: muxlock's options, RESOURCE, then the command. The command starts at the first
/// word after RESOURCE that is not one of muxlock's options, and from there on every word is the command's, even
/// one that looks like an option of muxlock (`exec job make --ttl 5` passes --ttl to make). `--` before the command
/// is accepted, and needed only for a command whose name starts with `-`: a word there that starts with `-` and is
/// not an option of muxlock is refused, so that a mistyped option is never run as a program.
///
/// The guarantee: no process of the command's group runs past the lease's end. If the lock is lost, the group gets
/// SIGTERM before the lease ends and SIGKILL --kill-after later, and in any case before the lease ends; muxlock
/// exits 75. If muxlock itself is killed (SIGKILL, the OOM killer), a reaper process kills the group at once; if it
/// is stopped (SIGSTOP), at the lease's end. Ctrl-Z (SIGTSTP) is refused. When the command's first process exits,
/// anything it left running in its group is killed before the lock is released. Not guarded: processes that leave
/// the group (setsid, daemons), and every process of the tree stopped at once (a VM or container paused past the
/// lease): a fencing token (--fenced) covers those.
///
/// SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to muxlock are forwarded to the command; while waiting for the lock
/// they give up (exit 128+N, nothing held). The command sees MUXLOCK_RESOURCE, MUXLOCK_VALUE (the lock's value),
/// MUXLOCK_DEADLINE_MS (Unix time in ms until which the lock was certain when the command started; renewals move
/// it later) and, with --fenced, MUXLOCK_FENCE_TOKEN. No --json: stdout is the command's.
#[derive(ClapArgs)]
#[command(
    after_help = EXAMPLES,
    after_long_help = concat!(
        "Examples:\n  muxlock exec --ttl 30s nightly-report ./make-report --since yesterday\n  \
         muxlock exec -n backup sh -c 'pg_dump db | gzip > db.gz'   # a shell only if you ask\n  \
         muxlock exec --fenced ledger ./append-entries              # MUXLOCK_FENCE_TOKEN=N\n  \
         muxlock exec -w 10 job -- ./run                            # -- is optional\n\n\
         The resource's side of --fenced (a Redis key here; any store with a compare works):\n  \
         if tonumber(redis.call('GET', KEYS[2]) or 0) > tonumber(ARGV[1]) then return redis.error_reply('stale') end\n  \
         redis.call('SET', KEYS[2], ARGV[1]); redis.call('SET', KEYS[1], ARGV[2])   -- ARGV[1]=the token\n\n\
         Exit codes: the command's; 128+N if signal N killed it (or interrupted the wait); 1 (or -E N) \
         the lock is held; 75 the lock was lost while it ran; 126 cannot run it; 127 not found; 69 no \
         quorum; 64 usage; 78 config."
    )
)]
pub struct Args {
    /// The resource to lock (the Redis key).
    #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub resource: String,

    /// The command and its arguments: every word from here on.
    ///
    /// From the first word after RESOURCE that is not an option of muxlock (or the word after `--`) to the end.
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,

    /// The lease, renewed while the command runs.
    ///
    /// The guard renews it (at a third of it) while the command runs, so it is also how long the lock outlives
    /// muxlock if muxlock dies. A unit is required (30s, 2m).
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = ttl)]
    pub ttl: Duration,

    #[command(flatten)]
    pub waiting: Waiting,

    /// After SIGTERM on a lost lock, how long until SIGKILL.
    ///
    /// It can only make the SIGKILL come sooner: the process group is SIGKILLed before the lease ends (at the end
    /// minus half the guard's margin), whatever this says, and 100 ms after SIGTERM at the most when the lock's
    /// key is gone or holds another value on enough nodes (another client may hold the lock already). A bare
    /// number is seconds, as timeout's -k.
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = duration::parse_wait)]
    pub kill_after: Duration,

    /// Pass a fencing token to the command as MUXLOCK_FENCE_TOKEN.
    ///
    /// A number larger than the token of every earlier fenced acquisition of RESOURCE, so that the resource can
    /// refuse a stale writer (see the examples below). One more round trip to acquire; the nodes should persist
    /// every write (appendfsync always) for the tokens to survive a restart.
    #[arg(long)]
    pub fenced: bool,

    #[command(flatten)]
    pub conn: Conn,
}

/// The examples of `exec -h` (`--help` has them with more).
const EXAMPLES: &str = "Examples:\n  muxlock exec --ttl 30s nightly-report ./make-report --since yesterday\n  \
                        muxlock exec -n backup sh -c 'pg_dump db | gzip > db.gz'";

/// What the main loop hears about.
enum Event {
    /// The command exited (its leader: the process muxlock started).
    Exited(io::Result<ExitStatus>),
    /// The guard says the lock can no longer be relied on (or it was released).
    Lost,
    /// muxlock received this signal.
    Signal(i32),
    /// The reaper ended, and muxlock did not kill it.
    ReaperEnded,
}

/// Why the command is being stopped.
enum Stop {
    /// The lock is lost.
    Lost(Lost),
    /// The reaper ended unexpectedly: the command would no longer die with muxlock.
    ReaperGone,
}

/// After SIGKILL, how long muxlock waits for the command's leader to be reaped before it exits anyway.
const AFTER_KILL: Duration = Duration::from_secs(5);

/// Between SIGTERM and SIGKILL when the lock's key is gone or holds another value on enough nodes that a majority
/// is impossible: another client may hold the lock already, so `--kill-after` is cut to this.
const TAKEN_GRACE: Duration = Duration::from_millis(100);

/// The signals `exec` catches from its start.
const CAUGHT: [i32; 5] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP];

/// Runs the command under the lock; returns the exit code.
///
/// # Errors
///
/// The conflict code when the lock is held; [`exit::LOST`] when it was lost while the command ran (after the
/// command ended); [`exit::CANNOT_RUN`] / [`exit::NOT_FOUND`] when the command cannot be started; 128 + N when
/// signal N interrupted the acquisition; the codes of [`CliError::lock`] for the acquisition.
pub fn run(args: &Args) -> Result<u8, CliError> {
    let Some((program, rest)) = args.command.split_first() else {
        return Err(CliError::usage("no command given"));
    };
    let locks = args.conn.manager(0)?;
    args.conn.note_lease(args.ttl);
    // Caught from before the first round: an interrupt while waiting gives up and leaves nothing held.
    let mut interrupts = Interrupts::install(&CAUGHT, &locks)?;
    // The nodes' tallies before the attempt that got the lock: what its round changed is the degraded quorum.
    let mut mark = Mark::now(&locks);
    let guard = acquiring::acquire(
        &args.resource,
        &args.waiting,
        &interrupts,
        |wait| {
            mark = Mark::now(&locks);
            let request = locks.request(&args.resource).ttl(args.ttl);
            let request = match args.fenced {
                true => request.fenced(),
                false => request,
            };
            acquiring::within(request, wait).hold()
        },
        drop,
    )?;
    output::warn_degraded(&mark.degraded(&locks, &args.resource), &locks, "acquired");
    let watch = guard.watch();
    let (ttl, round_timeout) = (args.ttl, args.conn.round_timeout);
    let kill_by = move |deadline: Instant| kill_deadline(deadline, ttl, round_timeout);
    let (reaper, mut deadlines) = Reaper::start(kill_by(watch.deadline()))?;
    let reaper_pid = reaper.child.id();
    let group = reaper.group();
    let end_group = |group: Option<Pid>| {
        if let Some(group) = group {
            let _ = kill_process_group(group, Signal::KILL);
        }
    };
    if let Some(signal) = interrupts.interrupted() {
        end_group(group);
        finish_reaper(reaper);
        return Err(Interrupts::error(signal, &args.resource));
    }
    // Granted, then paused past its deadline, or the reaper slow to start (a loaded machine): the lock may be
    // lost, or its kill deadline passed, and a renewal may have moved it. Checked here, right before the command
    // starts, not before the reaper: a command must never start after its lease, and a reaper slow to start
    // could otherwise push it seconds into the next holder's.
    let sent_deadline = watch.deadline();
    if guard.is_lost() || kill_by(sent_deadline) <= Instant::now() {
        end_group(group);
        finish_reaper(reaper);
        let why = guard.lost().unwrap_or(Lost::Expired(None));
        return Err(CliError::new(
            exit::LOST,
            "lost",
            format!(
                "lock {:?} was lost before the command started ({why}); the command did not run",
                args.resource
            ),
        ));
    }
    if deadlines.send(kill_by(sent_deadline)).is_err() {
        end_group(group);
        finish_reaper(reaper);
        return Err(CliError::new(
            exit::OSERR,
            "os",
            format!(
                "muxlock's reaper (pid {reaper_pid}) ended before the command started; it did not run"
            ),
        ));
    }
    // Notes while the command runs are written by a thread of their own: a stderr that blocks (a terminal after
    // Ctrl-S, a stuck pipe) must never hold up a signal or a kill.
    let notes = Notes::start();
    let deadline_ms =
        unix_ms(SystemTime::now() + watch.deadline().saturating_duration_since(Instant::now()));
    let mut command = Command::new("/proc/self/exe");
    command
        .arg("__run")
        .arg("--parent")
        .arg(std::process::id().to_string())
        .arg("--")
        .arg(program)
        .args(rest)
        .process_group(group.map_or(0, |g| g.as_raw_nonzero().get()))
        .env("MUXLOCK_RESOURCE", &args.resource)
        .env("MUXLOCK_VALUE", guard.value())
        .env("MUXLOCK_DEADLINE_MS", deadline_ms.to_string());
    if let Some(token) = guard.token() {
        command.env("MUXLOCK_FENCE_TOKEN", token.to_string());
    }
    // Spawned from the main thread: the command's parent-death signal follows this thread, which lives as long
    // as muxlock does.
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            end_group(group);
            finish_reaper(reaper);
            drop(guard); // releases the lock
            return Err(CliError::new(
                exit::OSERR,
                "os",
                format!("cannot start the command's process: {e}"),
            ));
        }
    };
    let pid = child.id();
    let signal_group = |signal: Signal| {
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
    {
        // Each confirmed renewal moves the guard's deadline: the reaper hears the new kill deadline. The reaper
        // is not waited for (its zombie keeps the group's id from being reused): its end is seen in /proc.
        let tx = tx.clone();
        let watch = guard.watch();
        let every = (ttl / 20).clamp(Duration::from_millis(10), Duration::from_millis(100));
        thread::spawn(move || {
            let mut last = sent_deadline;
            loop {
                thread::sleep(every);
                let alive = procs::stat(reaper_pid).is_some_and(|s| !matches!(s.state, 'Z' | 'X'));
                let deadline = watch.deadline();
                let sent = match deadline != last && !watch.is_lost() {
                    true => deadlines.send(kill_by(deadline)).is_ok(),
                    false => true,
                };
                last = deadline;
                if !alive || !sent {
                    let _ = tx.send(Event::ReaperEnded);
                    return;
                }
            }
        });
    }
    let signals = std::mem::replace(&mut interrupts.rx, mpsc::channel().1);
    thread::spawn(move || {
        for signal in signals {
            if tx.send(Event::Signal(signal)).is_err() {
                break;
            }
        }
    });

    let mut stop: Option<Stop> = None;
    let mut kill_at: Option<Instant> = None;
    let mut killed_at: Option<Instant> = None;
    let status = loop {
        // The group never lives past the kill deadline, whatever --kill-after says and whether or not the guard's
        // loss was heard.
        let now = Instant::now();
        let timer = match killed_at {
            Some(at) => at + AFTER_KILL,
            None => kill_at.unwrap_or_else(|| kill_by(watch.deadline())),
        };
        let event = match timer.checked_duration_since(now) {
            None => None,
            Some(left) => match rx.recv_timeout(left) {
                Ok(event) => Some(event),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => break None,
            },
        };
        let Some(event) = event else {
            if killed_at.is_some() {
                notes.say(format!(
                    "the command (pid {pid}) did not end within {} of SIGKILL; muxlock exits without it",
                    duration::human(AFTER_KILL)
                ));
                break None;
            }
            if kill_at.is_none() && kill_by(watch.deadline()) > Instant::now() {
                continue; // renewed since the timer was set
            }
            // The kill first, the words after.
            end_group(group);
            killed_at = Some(Instant::now());
            notes.say(match &stop {
                Some(_) if kill_at.is_some_and(|at| at < kill_by(watch.deadline())) => format!(
                    "the command did not exit within --kill-after {} of SIGTERM: SIGKILL to its process group",
                    duration::human(args.kill_after)
                ),
                _ => "the command's lease is about to end: SIGKILL to its process group".to_owned(),
            });
            if stop.is_none() {
                stop = Some(Stop::Lost(guard.lost().unwrap_or(Lost::Expired(None))));
            }
            continue;
        };
        // The reaper ends by itself at the kill deadline, which comes after the guard's: that is the loss.
        let event = match event {
            Event::ReaperEnded if guard.is_lost() => Event::Lost,
            event => event,
        };
        match event {
            Event::Exited(status) => break Some(status),
            Event::Lost | Event::ReaperEnded if stop.is_some() || killed_at.is_some() => {}
            Event::Lost | Event::ReaperEnded => {
                let (why, reason) = match event {
                    Event::Lost => {
                        let lost = guard.lost().unwrap_or(Lost::Expired(None));
                        (
                            format!(
                                "lock {:?} lost while the command ran: {lost}",
                                args.resource
                            ),
                            Stop::Lost(lost),
                        )
                    }
                    _ => (
                        format!(
                            "muxlock's reaper (pid {reaper_pid}) ended: the command would no longer die with \
                             muxlock"
                        ),
                        Stop::ReaperGone,
                    ),
                };
                // --kill-after only shortens the time between SIGTERM and SIGKILL: never past the kill deadline.
                // A key gone or taken by another value on enough nodes is certain loss, now: another client may
                // already hold the lock (keys evicted under maxmemory, deleted by hand), so SIGKILL follows
                // TAKEN_GRACE after SIGTERM at the most.
                let hard = kill_by(watch.deadline());
                let taken = matches!(stop_reason_lost(&reason), Some(Lost::Taken(_)));
                let term_for = match taken {
                    true => args.kill_after.min(TAKEN_GRACE),
                    false => args.kill_after,
                };
                let at = Instant::now()
                    .checked_add(term_for)
                    .map_or(hard, |at| at.min(hard));
                signal_group(Signal::TERM);
                notes.say(format!(
                    "{why}; SIGTERM to its process group, SIGKILL in {}",
                    duration::human(at.saturating_duration_since(Instant::now()))
                ));
                kill_at = Some(at);
                stop = Some(reason);
            }
            Event::Signal(signal) => {
                if let Some(signal) = Signal::from_named_raw(signal).filter(|_| killed_at.is_none())
                {
                    signal_group(signal);
                }
            }
        }
    };

    // A command that ended after the guard's deadline (muxlock stopped or starved, its reaper's kill) did not run
    // under the lock to its end.
    if stop.is_none() {
        if let Some(lost) = guard.lost() {
            notes.say(format!(
                "lock {:?} lost while the command ran: {lost}",
                args.resource
            ));
            stop = Some(Stop::Lost(lost));
        }
    }

    // Nothing of the group runs after the lock is released or lost: whatever the leader left behind is killed
    // first (the reaper with it).
    let leftovers: Vec<u32> = group
        .map(|g| procs::group_members(g.as_raw_nonzero().get().unsigned_abs()))
        .unwrap_or_default()
        .into_iter()
        .filter(|&p| p != reaper_pid)
        .collect();
    end_group(group);
    finish_reaper(reaper);
    if !leftovers.is_empty() {
        notes.say(format!(
            "the command's leader exited and left {} process{} of its group running ({}): SIGKILL before the \
             lock {}",
            leftovers.len(),
            if leftovers.len() == 1 { "" } else { "es" },
            leftovers
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            if stop.is_some() {
                "is given up"
            } else {
                "is released"
            }
        ));
    }

    // Nothing of the group runs any more: the notes may take their time (bounded) before the release.
    notes.finish();
    let released = match stop {
        Some(_) => {
            drop(guard); // a compare-and-delete: never deletes another holder's key
            None
        }
        None => Some(guard.release()),
    };
    let status = match status {
        Some(Ok(status)) => Some(status),
        Some(Err(e)) => {
            return Err(CliError::new(
                exit::OSERR,
                "os",
                format!("cannot wait for the command (pid {pid}): {e}"),
            ));
        }
        None if stop.is_some() => None,
        None => {
            return Err(CliError::new(
                exit::SOFTWARE,
                "internal",
                "lost track of the command",
            ));
        }
    };
    let it = status.map_or_else(|| "did not end".to_owned(), describe);
    match stop {
        Some(Stop::Lost(why)) => Err(CliError::new(
            exit::LOST,
            "lost",
            format!(
                "the command was stopped because lock {:?} was lost ({}): it {it}",
                args.resource,
                short(&why),
            ),
        )),
        Some(Stop::ReaperGone) => Err(CliError::new(
            exit::OSERR,
            "os",
            format!(
                "the command was stopped because muxlock's reaper ended (pid {reaper_pid}, killed?): it {it}"
            ),
        )),
        None => {
            match released {
                Some(Err(e)) if e.is_lost() => output::note(&format!(
                    "lock {:?} was no longer held by a majority when released ({e}): the command's work may \
                     have overlapped another holder's",
                    args.resource
                )),
                Some(Err(e)) => output::note(&format!(
                    "could not confirm the release of {:?} ({e}): the lock ends with its lease",
                    args.resource
                )),
                _ => {}
            }
            Ok(status.map_or(exit::SOFTWARE, code_of))
        }
    }
}

/// The loss a stop is for, if it is one.
fn stop_reason_lost(stop: &Stop) -> Option<&Lost> {
    match stop {
        Stop::Lost(lost) => Some(lost),
        _ => None,
    }
}
