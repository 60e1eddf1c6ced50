//! `muxlock release RESOURCE VALUE`: releases a lock held by its value (compare-and-delete on every node: another
//! holder's lock is never touched).

use clap::Args as ClapArgs;
use muxlock::{Error, LockManager, Outcome};
use serde::Serialize;

use crate::exit::{self, CliError};
use crate::nodes::Conn;
use crate::output;
use crate::verdict::{self, Degraded, Mark, Verb};

/// Release a lock by its value (as printed by `muxlock acquire`).
///
/// Deletes the key on every node that still holds this value, never another holder's. Exits 0 when a majority
/// deleted it, 75 when the value was not held by a majority any more (the lease had run out, or the lock was
/// released already): the work it protected may have overlapped another holder's.
#[derive(ClapArgs)]
#[command(after_help = "Example:\n  muxlock release nightly-report \"$v\"")]
pub struct Args {
    /// The locked resource (the Redis key).
    #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub resource: String,

    /// The lock's value, as printed by `muxlock acquire`.
    #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub value: String,

    /// Print a JSON object instead of a sentence.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub conn: Conn,
}

#[derive(Serialize)]
struct Released<'a> {
    resource: &'a str,
    released: usize,
    nodes: usize,
    quorum: usize,
    /// The nodes that failed although a majority released.
    degraded: &'a [Degraded],
}

/// Runs the command.
///
/// # Errors
///
/// [`exit::LOST`] if fewer than a majority deleted the key; the codes of [`CliError::round`] otherwise. The error
/// says what each node did; a node that did not hold the value is told apart (absent, or another value) by a read
/// of the key after the round.
pub fn run(args: &Args) -> Result<(), CliError> {
    let locks = args.conn.manager(0)?;
    let (nodes, quorum) = (locks.nodes().len(), locks.quorum());
    let mark = Mark::now(&locks);
    let released = match locks.unlock_value(&args.resource, &args.value) {
        Ok(released) => released,
        Err(e) if e.report().is_some() => return Err(failed(args, &locks, &e)),
        Err(e) => return Err(e.into()),
    };
    let degraded = mark.degraded(&locks, &args.resource);
    let doc = Released {
        resource: &args.resource,
        released,
        nodes,
        quorum,
        degraded: &degraded,
    };
    output::warn_degraded(&degraded, &locks, "released");
    output::emit(args.json, &doc, || {
        format!(
            "released {:?} ({released} of {nodes} nodes confirmed, {quorum} needed)\n",
            args.resource
        )
    })
}

/// The error of a failed release, each node's line worded from a read of the key after it.
fn failed(args: &Args, locks: &LockManager, e: &Error) -> CliError {
    let value = args.value.as_bytes();
    // Nodes that answered "not ours" are read again: the key absent, or another holder's.
    let refused = e.report().is_some_and(|r| {
        r.nodes()
            .iter()
            .any(|(_, o)| matches!(o, Outcome::Taken | Outcome::NotHeld))
    });
    let seen = match refused {
        true => locks.inspect(&args.resource).ok(),
        false => None,
    };
    let mut error = CliError::round(
        e,
        exit::LOST,
        Verb::Release,
        seen.as_ref().map(|s| (s, value)),
    );
    if let Error::LockLost(_) = e {
        // A majority answered, fewer than a majority deleted the key: the library's lost lock, in the command's
        // own words.
        let (nodes, quorum) = (locks.nodes().len(), locks.quorum());
        let deleted = e.report().map_or(0, |r| r.granted());
        let (absent, other) = verdict::absent_and_other(&error.nodes);
        let mut why = Vec::new();
        if absent > 0 || seen.is_none() {
            why.push(match absent {
                0 => "its lease had run out, or it was released already".to_owned(),
                n => format!("absent on {n}: its lease had run out, or it was released already"),
            });
        }
        if other > 0 {
            why.push(format!("another value on {other}: another holder has it"));
        }
        error.message = format!(
            "lock {:?} was not held with this value by a majority: deleted on {deleted} of {nodes} nodes, \
             {quorum} needed ({})",
            args.resource,
            why.join("; ")
        );
    }
    error
}
