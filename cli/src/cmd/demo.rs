//! `muxlock demo`: the README's main job, a live demonstration of mutual exclusion under failures.
//!
//! **Not built yet.** Its arguments are here so that `--help` documents it; it needs the lock guard of issue #9
//! (workers hold their locks with `LockManager::hold` and learn of a loss from `Guard::wait_lost`). Until then
//! [`run`] says so and exits [`exit::UNAVAILABLE`].
//!
//! What the finished `run` does, per issue #10: start a local 5-node cluster when none is running (as
//! `cluster up`); run workers (threads, and at least one other process) that contend for a few resources while a
//! protected counter checks mutual exclusion; kill a node and restart it midway, pause one; print a live line per
//! second on a terminal (plain lines otherwise); at the end, acquisitions, hand-offs, latency percentiles, per-node
//! stats, violations (0) and what the restart guard did; then stop what it started.

use std::time::Duration;

use clap::Args as ClapArgs;

use crate::duration;
use crate::exit::{self, CliError};
use crate::nodes::Conn;

/// Show the lock at work: workers contend while nodes are killed, restarted and paused [not built yet: arrives
/// with the guard, issue #9].
///
/// Starts a local 5-node cluster unless one is running (or --nodes is given), runs worker threads and processes
/// that contend for a few resources while a protected counter checks mutual exclusion, kills a node and restarts
/// it, pauses one, prints what happens live, and a summary at the end (acquisitions, hand-offs, latency
/// percentiles, per-node stats, violations). Stops what it started.
#[derive(ClapArgs)]
#[command(after_help = "Example:\n  muxlock demo\n  muxlock demo --short   # the CI run")]
pub struct Args {
    /// How long the demo runs.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = duration::parse)]
    pub duration: Duration,

    /// A short run (about 10 s) with the same events, for CI.
    #[arg(long, conflicts_with = "duration")]
    pub short: bool,

    /// Worker threads in this process.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub threads: u32,

    /// Worker processes besides this one (at least one, to show locks across processes).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub processes: u32,

    /// Resources the workers contend for.
    #[arg(long, value_name = "K", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub resources: u32,

    /// Each lock's lease (the guard extends it while the work runs).
    #[arg(long, value_name = "DUR", default_value = "2s", value_parser = crate::cmd::ttl)]
    pub ttl: Duration,

    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub conn: Conn,
}

/// Says that `demo` is not built yet.
///
/// # Errors
///
/// Always [`exit::UNAVAILABLE`], until the guard of issue #9 lands.
pub fn run(_args: &Args) -> Result<(), CliError> {
    Err(CliError::new(
        exit::UNAVAILABLE,
        "not_built",
        "muxlock demo: not built yet: arrives with the guard (issue #9). Meanwhile `muxlock cluster up` \
         and `muxlock bench` show the lock at work",
    ))
}
