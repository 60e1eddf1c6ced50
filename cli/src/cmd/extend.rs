//! `muxlock extend RESOURCE VALUE --ttl 30s`: extends a lock held by its value (compare-and-pexpire on every node).

use std::time::{Duration, Instant, SystemTime};

use clap::Args as ClapArgs;
use serde::Serialize;

use crate::cmd::ttl;
use crate::duration::{self, millis};
use crate::exit::CliError;
use crate::nodes::Conn;
use crate::output;
use crate::state::unix_ms;

/// Extend a lock by its value: its lease ends --ttl from now.
///
/// Only a key that still holds the value is extended: an expired or released lock is not revived (exit 75), and
/// another holder's is never touched.
#[derive(ClapArgs)]
#[command(after_help = "Example:\n  muxlock extend nightly-report \"$v\" --ttl 5m")]
pub struct Args {
    /// The locked resource (the Redis key).
    #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub resource: String,

    /// The lock's value, as printed by `muxlock acquire`.
    #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub value: String,

    /// The new lease, from now.
    #[arg(long, value_name = "DUR", value_parser = ttl)]
    pub ttl: Duration,

    /// Print a JSON object instead of a sentence.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub conn: Conn,
}

#[derive(Serialize)]
struct Extended<'a> {
    resource: &'a str,
    ttl_ms: u64,
    validity_ms: u64,
    deadline_unix_ms: u64,
}

/// Runs the command.
///
/// # Errors
///
/// [`exit::LOST`](crate::exit::LOST) if a majority no longer holds the value; the codes of [`CliError::lock`]
/// otherwise.
pub fn run(args: &Args) -> Result<(), CliError> {
    let locks = args.conn.manager(0)?;
    let valid_until = locks.extend_value(&args.resource, &args.value, args.ttl)?;
    let validity = valid_until.saturating_duration_since(Instant::now());
    let doc = Extended {
        resource: &args.resource,
        ttl_ms: millis(args.ttl),
        validity_ms: millis(validity),
        deadline_unix_ms: unix_ms(SystemTime::now() + validity),
    };
    output::emit(args.json, &doc, || {
        format!(
            "extended {:?}: valid for {} more\n",
            args.resource,
            duration::human(validity)
        )
    })
}
