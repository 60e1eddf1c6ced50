//! Exit codes and the CLI's one error type.
//!
//! The codes follow flock(1) where it has one (a conflict is 1 unless `-E` says otherwise; `exec` exits with the
//! command's own code, or 128 + the signal that killed it) and sysexits(3) for the rest, as flock does. The README's
//! "Exit codes" table is this list; `cli/tests/` checks each code a user can provoke.

use std::fmt;

use muxlock::Error;

use crate::verdict::{self, Cause, NodeLine, Verb};

/// Success.
pub const OK: u8 = 0;
/// The resource is held by another holder (`acquire -n`, or `--wait` ran out while it was held). `-E N` changes it.
pub const CONFLICT: u8 = 1;
/// `extend`: the new lease was applied on a majority of nodes but not counted (the restart guard does not count
/// young nodes yet): the lock stands on the nodes, unconfirmed, until up to `--ttl` from now. Not a lost lock
/// (75), nor one the nodes never saw (69): release it, or extend it again.
pub const UNCONFIRMED: u8 = 3;
/// EX_USAGE: bad arguments (unknown option, missing argument, a duration without a unit...).
pub const USAGE: u8 = 64;
/// EX_UNAVAILABLE: no quorum (too many nodes down, hung, refusing, or not counted yet after a restart); a node of
/// the local cluster not running; `redis-server` missing; `demo` granted no lock at all; a feature not
/// built yet (`--tls`).
pub const UNAVAILABLE: u8 = 69;
/// EX_SOFTWARE: an internal error, a bug in muxlock (reported as one line, never a backtrace).
pub const SOFTWARE: u8 = 70;
/// EX_OSERR: the OS refused something muxlock needs (randomness, an event poll, a signal, starting a process).
pub const OSERR: u8 = 71;
/// EX_CANTCREAT: `cluster up` cannot create the cluster: one is already running, the state directory cannot be
/// written, or a node did not start.
pub const CANTCREAT: u8 = 73;
/// EX_IOERR: the output could not be written (`acquire` then releases the lock it could not hand over).
pub const IOERR: u8 = 74;
/// EX_TEMPFAIL: the lock is lost: `extend`/`release` found that a majority no longer holds the value (it expired or
/// was released); `exec`: the lock was lost while the command ran, and the command was terminated.
pub const LOST: u8 = 75;
/// EX_NOPERM: nodes refused the login (wrong or missing password) and the quorum failed for it: their votes
/// would have made the majority.
pub const NOPERM: u8 = 77;
/// EX_CONFIG: no nodes to use (no `--nodes`, no `MUXLOCK_NODES`, no running local cluster), an invalid node URL,
/// or an invalid setting.
pub const CONFIG: u8 = 78;
/// `exec`: the command was found but could not be run (not executable), as env(1) and timeout(1).
pub const CANNOT_RUN: u8 = 126;
/// `exec`: the command was not found, as env(1) and timeout(1).
pub const NOT_FOUND: u8 = 127;

/// An error on its way to the user: one line on stderr (and, with `--json`, an object on stdout), and an exit code.
#[derive(Debug)]
pub struct CliError {
    /// The exit code.
    pub code: u8,
    /// A stable word for machines (`--json`): `conflict`, `quorum`, `lost`, `auth`, `unconfirmed`, `config`,
    /// `usage`, `unavailable`, `os`, `io`, `cluster`, `internal`.
    pub kind: &'static str,
    /// For an error from a round, the cause that decided ([`Cause::word`]).
    pub cause: Option<&'static str>,
    /// The headline, one line, naming the cause where nodes are to blame.
    pub message: String,
    /// Per node, what it did, when the error came from a round: a line each on stderr under the headline, and in
    /// `--json`.
    pub nodes: Vec<NodeLine>,
    /// The node lines were printed on stderr already (with the first failure of a retried acquisition): the
    /// headline is not followed by them again.
    pub nodes_shown: bool,
    /// More fields of the `--json` error object (a failed extension's `applied` and `after`).
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// The command printed its whole result before failing (`status` with too few nodes answering): with
    /// `--json`, no error object follows it, so that stdout stays one document.
    pub after_output: bool,
}

impl CliError {
    /// An error with this code, kind and message.
    pub fn new(code: u8, kind: &'static str, message: impl Into<String>) -> CliError {
        CliError {
            code,
            kind,
            cause: None,
            message: message.into(),
            nodes: Vec::new(),
            nodes_shown: false,
            extra: serde_json::Map::new(),
            after_output: false,
        }
    }

    /// Marks the error as coming after the command's whole result was printed.
    #[must_use]
    pub fn after_output(mut self) -> CliError {
        self.after_output = true;
        self
    }

    /// EX_USAGE.
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError::new(USAGE, "usage", message)
    }

    /// EX_CONFIG.
    pub fn config(message: impl Into<String>) -> CliError {
        CliError::new(CONFIG, "config", message)
    }

    /// A lock error of an acquisition, with `conflict` as the exit code of [`Error::Held`].
    pub fn lock(e: &Error, conflict: u8) -> CliError {
        CliError::round(e, conflict, Verb::Acquire, None)
    }

    /// A lock error of a round of `verb`, with `conflict` as the exit code of [`Error::Held`]: the headline names
    /// the cause that decided, and the code follows it; `seen` (a read of the key after the round) and the
    /// lock's value word the nodes that answered "not ours".
    pub fn round(
        e: &Error,
        conflict: u8,
        verb: Verb,
        seen: Option<(&muxlock::Inspection, &[u8])>,
    ) -> CliError {
        let cause = verdict::cause(e);
        let (code, kind) = match (e, cause) {
            (Error::Held(_), _) => (conflict, "conflict"),
            (Error::Quorum(_), Some(Cause::Auth)) => (NOPERM, "auth"),
            (Error::Quorum(_), _) => (UNAVAILABLE, "quorum"),
            (Error::Expired | Error::LockLost(_) | Error::ExtendLimit(_), _) => (LOST, "lost"),
            (Error::Config(_), _) => (CONFIG, "config"),
            (Error::Os { .. }, _) => (OSERR, "os"),
            _ => (SOFTWARE, "internal"),
        };
        let (message, nodes) = match e.report() {
            Some(r) => {
                let resource = String::from_utf8_lossy(r.resource()).into_owned();
                (
                    verdict::headline(e, verb, &resource),
                    verdict::node_lines(r, verb, seen.map(|s| s.0), seen.map(|s| s.1)),
                )
            }
            None => (e.to_string(), Vec::new()),
        };
        CliError {
            code,
            kind,
            cause: cause.map(Cause::word),
            message,
            nodes,
            nodes_shown: false,
            extra: serde_json::Map::new(),
            after_output: false,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<Error> for CliError {
    fn from(e: Error) -> CliError {
        CliError::lock(&e, CONFLICT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_where_they_mean_different_things() {
        let codes = [
            OK,
            CONFLICT,
            UNCONFIRMED,
            USAGE,
            UNAVAILABLE,
            SOFTWARE,
            OSERR,
            CANTCREAT,
            IOERR,
            LOST,
            NOPERM,
            CONFIG,
            CANNOT_RUN,
            NOT_FOUND,
        ];
        let mut sorted = codes.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), codes.len());
        // Nothing collides with 128 + signal, which `exec` reports for a command killed by a signal.
        assert!(codes.iter().all(|&c| c < 128));
    }

    #[test]
    fn lock_errors_map_to_their_codes() {
        assert_eq!(CliError::lock(&Error::Expired, 1).code, LOST);
        let config = muxlock::LockManager::new(Vec::<String>::new()).unwrap_err();
        assert_eq!(CliError::from(config).code, CONFIG);
    }
}
