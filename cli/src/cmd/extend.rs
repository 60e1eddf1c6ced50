//! `muxlock extend RESOURCE VALUE --ttl 30s`: extends a lock held by its value (compare-and-pexpire on every node).

use std::time::{Duration, Instant, SystemTime};

use clap::Args as ClapArgs;
use muxlock::{Error, LockManager, Outcome};
use serde::Serialize;

use crate::cmd::ttl;
use crate::duration::{self, millis};
use crate::exit::{self, CliError};
use crate::nodes::Conn;
use crate::output;
use crate::state::unix_ms;
use crate::verdict::{self, After, Cause, Degraded, Mark, Verb};

/// Extend a lock by its value: its lease ends --ttl from now.
///
/// Only a key that still holds the value is extended: an expired or released lock is not revived (exit 75), and
/// another holder's is never touched. A failed extension may still have run on nodes: the error says what each
/// node did (applied, applied but not counted, refused: absent or another value, no answer) and what stands of
/// the lock after it. Applied on a majority but not counted (young nodes, under the restart guard): exit 3, the
/// lock stands unconfirmed up to --ttl from now: release it, or extend it again.
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
    /// The nodes that failed or were not counted although a majority extended.
    degraded: &'a [Degraded],
}

/// Runs the command.
///
/// # Errors
///
/// [`exit::UNCONFIRMED`] if a majority applied the new lease but the restart guard did not count enough of
/// them; [`exit::LOST`] if a majority no longer holds the value; the codes of [`CliError::round`] otherwise. The
/// error says what each node did and, from a read of the key after the round, what stands of the lock.
pub fn run(args: &Args) -> Result<(), CliError> {
    let locks = args.conn.manager(0)?;
    args.conn.note_lease(args.ttl);
    let mark = Mark::now(&locks);
    let valid_until = match locks.extend_value(&args.resource, &args.value, args.ttl) {
        Ok(valid_until) => valid_until,
        Err(e) if e.report().is_some() => return Err(failed(args, &locks, &e)),
        Err(e) => return Err(e.into()),
    };
    let degraded = mark.degraded(&locks, &args.resource);
    let validity = valid_until.saturating_duration_since(Instant::now());
    let doc = Extended {
        resource: &args.resource,
        ttl_ms: millis(args.ttl),
        validity_ms: millis(validity),
        deadline_unix_ms: unix_ms(SystemTime::now() + validity),
        degraded: &degraded,
    };
    output::warn_degraded(&degraded, &locks, "extended");
    output::emit(args.json, &doc, || {
        format!(
            "extended {:?}: valid for {} more\n",
            args.resource,
            duration::human(validity)
        )
    })
}

/// The error of a failed extension: the cause that decided, what each node did, and what stands of the lock
/// after it (a failed extension may have run on nodes: their keys now end `--ttl` after it ran).
fn failed(args: &Args, locks: &LockManager, e: &Error) -> CliError {
    let value = args.value.as_bytes();
    // A read of the key on every node: tells an absent key from another holder's, and what stands.
    let seen = locks.inspect(&args.resource).ok();
    let mut error = CliError::round(
        e,
        exit::CONFLICT,
        Verb::Extend,
        seen.as_ref().map(|s| (s, value)),
    );
    let report = e.report();
    let n = report.map_or(0, |r| r.nodes().len());
    let quorum = locks.quorum();
    let applied = report.map_or(0, |r| {
        r.nodes()
            .iter()
            .filter(|(_, o)| matches!(o, Outcome::Granted | Outcome::Quarantined))
            .count()
    });
    let after = seen.as_ref().map(|s| After::of(s, value));
    let state = after.as_ref().map(After::words).unwrap_or_else(|| {
        "the read after it failed: the lock may stand up to --ttl from now".to_owned()
    });
    let resource = &args.resource;
    if matches!(e, Error::Quorum(_)) && applied >= quorum {
        // Applied on a majority, not counted: the lock stands on the nodes, unconfirmed.
        error.code = exit::UNCONFIRMED;
        error.kind = "unconfirmed";
        let why = match verdict::cause(e) {
            Some(Cause::Young) => {
                let left = report.and_then(|r| r.restart_wait()).unwrap_or_default();
                format!(
                    "young nodes (the restart guard counts them in {}; nodes that persist every write count at \
                     once: `muxlock cluster up` starts such nodes)",
                    duration::human(left)
                )
            }
            _ => "the round ended first".to_owned(),
        };
        error.message = format!(
            "extension of {resource:?} not confirmed: applied on {applied} of {n} nodes but not counted: {why}; \
             {state}"
        );
    } else if matches!(e, Error::LockLost(_)) {
        let (absent, other) = verdict::absent_and_other(&error.nodes);
        let mut why = Vec::new();
        if absent > 0 {
            why.push(format!(
                "absent on {absent}: its lease ran out, or it was released"
            ));
        }
        if other > 0 {
            why.push(format!("another value on {other}"));
        }
        error.message = format!(
            "lock {resource:?} is not held with this value by a majority: extended on {applied} of {n} nodes, \
             {quorum} needed{}; {state}",
            match why.is_empty() {
                true => String::new(),
                false => format!(" ({})", why.join("; ")),
            }
        );
    } else {
        let prefix = format!("no quorum for lock {resource:?}: ");
        let headline = error
            .message
            .strip_prefix(&prefix)
            .unwrap_or(&error.message);
        error.message = format!("extension of {resource:?} failed: no quorum: {headline}; {state}");
    }
    error
        .extra
        .insert("applied".into(), serde_json::Value::from(applied));
    if let Some(after) = after.and_then(|a| serde_json::to_value(a).ok()) {
        error.extra.insert("after".into(), after);
    }
    error
}
