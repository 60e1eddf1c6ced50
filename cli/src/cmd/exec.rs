//! `muxlock exec RESOURCE -- COMMAND [ARGS...]`: runs a command under the lock, kept alive while it runs.
//!
//! **Not built yet.** Its arguments are all here, so that `--help` documents the command, but it needs the lock
//! guard of issue #9: `LockManager::hold` (a watchdog that extends the lease while the command runs),
//! `Guard::wait_lost` (the signal to terminate the command *before* the lease ends) and `lock_wait` (waiting without
//! polling). Until then [`run`] says so and exits [`exit::UNAVAILABLE`]; it never pretends to run the command.
//!
//! What the finished `run` does, per issue #10: acquire (waiting up to `--wait`, or not with `-n`; conflict:
//! `-E`'s code, default 1); spawn `COMMAND ARGS` directly (no shell) in its own process group, with
//! `MUXLOCK_RESOURCE`, `MUXLOCK_VALUE` and `MUXLOCK_DEADLINE_MS` in its environment; hold the lock with a guard
//! while it runs; forward SIGINT/SIGTERM/SIGHUP to it; when it exits, release, and exit with its code (128 + N if
//! signal N killed it). If the lock is lost: SIGTERM to the process group at the guard's lost signal (before the
//! lease ends), SIGKILL after `--kill-after`, the reason on stderr, exit [`exit::LOST`]. A command that cannot be
//! run: [`exit::CANNOT_RUN`] (126) or [`exit::NOT_FOUND`] (127), as env(1).

use std::ffi::OsString;
use std::time::Duration;

use clap::Args as ClapArgs;

use crate::cmd::{Waiting, ttl};
use crate::duration;
use crate::exit::{self, CliError};
use crate::nodes::Conn;

/// Run a command while holding a lock, kept alive while it runs [not built yet: arrives with the guard, issue #9].
///
/// Acquires RESOURCE (waiting up to --wait), runs COMMAND with its ARGS directly (no shell), extends the lease while
/// it runs, and releases when it exits. Exits with the command's code, or 128+N if signal N killed it. If the lock
/// is lost while the command runs, the command's process group gets SIGTERM before the lease ends, SIGKILL after
/// --kill-after, and muxlock exits 75. The command sees MUXLOCK_RESOURCE, MUXLOCK_VALUE and MUXLOCK_DEADLINE_MS.
#[derive(ClapArgs)]
#[command(
    after_help = "Example:\n  muxlock exec --ttl 30s nightly-report -- ./make-report --since yesterday"
)]
pub struct Args {
    /// The resource to lock (the Redis key).
    #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub resource: String,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,

    /// The lease; the guard extends it while the command runs.
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

/// Says that `exec` is not built yet.
///
/// # Errors
///
/// Always [`exit::UNAVAILABLE`], until the guard of issue #9 lands.
pub fn run(_args: &Args) -> Result<(), CliError> {
    Err(CliError::new(
        exit::UNAVAILABLE,
        "not_built",
        "muxlock exec: not built yet: arrives with the guard (issue #9). Meanwhile: \
         v=$(muxlock acquire RESOURCE --ttl DUR) && COMMAND; muxlock release RESOURCE \"$v\"",
    ))
}
