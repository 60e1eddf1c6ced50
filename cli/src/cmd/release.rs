//! `muxlock release RESOURCE VALUE`: releases a lock held by its value (compare-and-delete on every node: another
//! holder's lock is never touched).

use clap::Args as ClapArgs;
use muxlock::Error;
use serde::Serialize;

use crate::exit::{self, CliError};
use crate::nodes::Conn;
use crate::output;

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
}

/// Runs the command.
///
/// # Errors
///
/// [`exit::LOST`] if fewer than a majority deleted the key; the codes of [`CliError::lock`] otherwise.
pub fn run(args: &Args) -> Result<(), CliError> {
    let locks = args.conn.manager(0)?;
    let (nodes, quorum) = (locks.nodes().len(), locks.quorum());
    let released = match locks.unlock_value(&args.resource, &args.value) {
        Ok(released) => released,
        // A majority answered, fewer than a majority deleted the key: the library's lost lock. Exit 75 with
        // every node's outcome (for `--json`), in the command's own words.
        Err(e @ Error::LockLost(_)) => {
            let deleted = e.report().map_or(0, |r| r.granted());
            let mut lost = CliError::lock(&e, exit::LOST);
            lost.message = format!(
                "lock {:?} was not held with this value by a majority: deleted on {deleted} of {nodes} nodes, \
                 {quorum} needed (its lease had run out, or it was released already)",
                args.resource,
            );
            return Err(lost);
        }
        Err(e) => return Err(e.into()),
    };
    let doc = Released {
        resource: &args.resource,
        released,
        nodes,
        quorum,
    };
    output::emit(args.json, &doc, || {
        format!(
            "released {:?} ({released} of {nodes} nodes confirmed, {quorum} needed)\n",
            args.resource
        )
    })
}
