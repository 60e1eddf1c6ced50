//! `muxlock acquire RESOURCE --ttl 30s`: takes the lock and prints its value for a script, which later hands it
//! to `muxlock extend` and `muxlock release`. The lock outlives the command: it ends when released or when the
//! lease runs out.

use std::time::{Duration, SystemTime};

use clap::Args as ClapArgs;
use serde::Serialize;

use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};

use crate::cmd::acquiring::{self, Interrupts};
use crate::cmd::{Waiting, ttl};
use crate::duration::{self, millis};
use crate::exit::{self, CliError};
use crate::nodes::Conn;
use crate::output;
use crate::state::unix_ms;
use crate::verdict::{Degraded, Mark};

/// Acquire a lock and print its value (for `extend` and `release`).
///
/// The value goes to stdout, for a script to pass to `muxlock extend` and `muxlock release`. Waits up to --wait
/// while another holder has the lock (-n: not at all), then exits 1 (or -E N). While too few nodes answer, it says
/// so at once and exits 69 after --outage-wait; nodes too young to count (the restart guard) are said at once, with
/// the time left, and waited for only if they count within --outage-wait. The lock is held until `muxlock release
/// RESOURCE VALUE` or the end of its lease. Nodes that failed while a majority granted are named in a warning.
#[derive(ClapArgs)]
#[command(
    after_help = "Example:\n  v=$(muxlock acquire nightly-report --ttl 5m) || exit\n  ... work ...\n  \
                        muxlock release nightly-report \"$v\""
)]
pub struct Args {
    /// The resource to lock (the Redis key).
    #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub resource: String,

    /// The lease: the lock ends by itself this long after it was taken.
    ///
    /// Unless extended (`muxlock extend`). A unit is required (30s, 5m).
    #[arg(long, value_name = "DUR", value_parser = ttl)]
    pub ttl: Duration,

    #[command(flatten)]
    pub waiting: Waiting,

    /// Print a JSON object instead of the bare value.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub conn: Conn,
}

#[derive(Serialize)]
struct Acquired<'a> {
    resource: &'a str,
    value: &'a str,
    ttl_ms: u64,
    validity_ms: u64,
    deadline_unix_ms: u64,
    /// The nodes that failed or were not counted although a majority granted.
    degraded: &'a [Degraded],
}

/// Runs the command.
///
/// # Errors
///
/// The conflict code when the lock stays held by another holder; the codes of [`CliError::lock`] otherwise;
/// [`exit::IOERR`] if the value cannot be printed (the lock is released then, since nobody could use it).
pub fn run(args: &Args) -> Result<(), CliError> {
    // Waiting is the request's `wait`: woken by releases (client-side tracking) and at the holder's lease end, no polling.
    let locks = args.conn.manager(0)?;
    args.conn.note_lease(args.ttl);
    // An interrupt while waiting gives up and releases whatever the attempt under way got.
    let interrupts = Interrupts::install(&[SIGINT, SIGTERM, SIGHUP, SIGQUIT], &locks)?;
    // The nodes' tallies before the attempt that got the lock: what its round changed is the degraded quorum.
    let mut mark = Mark::now(&locks);
    let lock = acquiring::acquire(
        &args.resource,
        &args.waiting,
        &interrupts,
        |wait| {
            mark = Mark::now(&locks);
            acquiring::within(locks.request(&args.resource).ttl(args.ttl), wait).acquire()
        },
        |lock| {
            let _ = locks.unlock(lock);
        },
    )?;
    let degraded = mark.degraded(&locks, &args.resource);
    let validity = lock.validity();
    let deadline = SystemTime::now() + validity;
    let doc = Acquired {
        resource: &args.resource,
        value: lock.value(),
        ttl_ms: millis(args.ttl),
        validity_ms: millis(validity),
        deadline_unix_ms: unix_ms(deadline),
        degraded: &degraded,
    };
    output::warn_degraded(&degraded, &locks, "acquired");
    let written = if args.json {
        output::print_json(&doc)
    } else {
        output::print(&format!("{}\n", lock.value()))
    };
    if let Err(e) = written {
        // Nobody got the value, so nobody can release the lock: release it now rather than block the resource
        // for a whole lease.
        let released = locks.unlock(lock).is_ok();
        return Err(CliError::new(
            exit::IOERR,
            "io",
            format!(
                "cannot print the lock value ({e}); {}",
                if released {
                    "released the lock"
                } else {
                    "could not release the lock: it ends with its lease"
                }
            ),
        ));
    }
    if !args.json && output::stderr_is_terminal() {
        output::note(&format!(
            "acquired {:?} for {}",
            args.resource,
            duration::human(validity)
        ));
    }
    Ok(())
}
