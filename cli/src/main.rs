//! `muxlock`: Redlock locks from the shell, a local cluster to try them on, and a benchmark.
//!
//! # Layout
//!
//! - `cmd`: one module per subcommand (`exec`, `acquire`, `release`, `extend`, `status`, `cluster up|down|status`,
//!   `bench`, `demo`).
//! - `nodes`: which nodes a command uses (`--nodes`, `MUXLOCK_NODES`, the local cluster) and the lock manager.
//! - `state`: where the local cluster is recorded; `certs`: the throwaway CA of `cluster up --tls`. `servers`:
//!   local redis-server nodes started and stopped (`cluster up`, `demo`). `procs`: processes by PID. `redis`: a
//!   small blocking client (plain or TLS) for the cluster's housekeeping.
//! - `duration`: `500ms`, `10s`, `2m`. `exit`: the exit codes. `output`: stdout, `--json`, errors, and no
//!   password in any of them. `verdict`: what a round did, in words: the cause that decided, each node's line,
//!   a degraded quorum.
//!
//! Nothing a user can do ends in a panic message or a backtrace: an error is one line on stderr (followed, when
//! nodes are to blame, by one line per node) with an exit code from `exit`; a bug still ends as one line
//! ("internal error") and EX_SOFTWARE.
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod certs;
mod cmd;
mod deadman;
mod duration;
mod exit;
mod nodes;
mod output;
mod procs;
mod redis;
mod servers;
mod shards;
mod state;
mod verdict;

use std::panic::{self, AssertUnwindSafe};
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::exit::CliError;

const AFTER_HELP: &str = "\
Nodes: --nodes URL,... (or MUXLOCK_NODES), else the local cluster of `muxlock cluster up`.

Environment:
  MUXLOCK_NODES          the nodes, comma-separated URLs
  MUXLOCK_PASSWORD       the password of node URLs that have none (never shown)
  MUXLOCK_ROUND_TIMEOUT  --round-timeout
  MUXLOCK_RESTART_GUARD  --restart-guard
  MUXLOCK_RESTART_WINDOW --restart-window
  MUXLOCK_TLS_CA, MUXLOCK_TLS_CERT, MUXLOCK_TLS_KEY   --tls-ca, --tls-cert, --tls-key (rediss:// nodes)
  MUXLOCK_STATE_DIR      where `cluster up` records its nodes (~/.local/state/muxlock)
  REDIS_SERVER           the redis-server binary of `cluster up`

Durations: 500ms, 10s, 2m, 1h, 1m30s. A bare number is seconds for waits (-w 10, --outage-wait,
--kill-after), as flock's -w and timeout's -k; a lease (--ttl) and --round-timeout need a unit.

Exit codes:
  0        success
  1        the lock is held by another holder (-E N changes it)
  3        extend: applied on a majority of nodes but not counted (young nodes): the lock
           stands, unconfirmed, up to --ttl from now; release it or extend again
  64       usage error (bad arguments)
  69       no quorum (nodes down, refusing, not counted yet); demo: no lock at all
  70       internal error (a bug); demo: mutual exclusion violated
  71       OS error
  73       cannot create the local cluster (one is running, a node did not start)
  74       cannot write the output
  75       the lock is lost, or not held with this value
  77       authentication refused (by enough nodes to fail the quorum)
  78       no nodes, or a bad node URL or setting
  exec:    the command's own code; 128+N if signal N killed it; 126 cannot run it,
           127 not found; 75 lock lost while it ran
  128+N    acquire, exec: signal N (SIGINT: 130) interrupted the wait; nothing is held

A verb that succeeds with nodes failing (unreachable, refusing the login, not counted yet) says so in one
warning line on stderr, and in --json's \"degraded\" list.

-n is --nonblock wherever it appears (as in flock); `cluster up` counts nodes with -c/--count.";

/// What `muxlock -h` ends with (`--help` ends with [`AFTER_HELP`]).
const AFTER_SHORT_HELP: &str = "\
Nodes: --nodes URL,... (or MUXLOCK_NODES), else the local cluster of `muxlock cluster up`.
'muxlock --help': the environment, durations and exit codes. 'muxlock COMMAND -h': its options.";

/// Redlock locks over N independent Redis masters, from the shell.
#[derive(Parser)]
#[command(
    name = "muxlock",
    version,
    after_help = AFTER_SHORT_HELP,
    after_long_help = AFTER_HELP,
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Exec(cmd::exec::Args),
    Acquire(cmd::acquire::Args),
    Release(cmd::release::Args),
    Extend(cmd::extend::Args),
    Status(cmd::status::Args),
    /// Start, stop and list a local cluster of redis-server nodes to try muxlock on.
    #[command(subcommand)]
    Cluster(cmd::cluster::Command),
    Bench(cmd::bench::Args),
    Demo(cmd::demo::Args),
    /// (internal) The dead-man's switch of `exec`: kills the command's group when muxlock dies or the lease ends.
    #[command(name = "__reaper", hide = true)]
    Reaper(deadman::ReaperArgs),
    /// (internal) The first process of `exec`'s command: dies with muxlock, then runs the command.
    #[command(name = "__run", hide = true)]
    Trampoline(deadman::RunArgs),
}

impl Command {
    fn json(&self) -> bool {
        match self {
            Command::Exec(_) | Command::Reaper(_) | Command::Trampoline(_) => false,
            Command::Acquire(a) => a.json,
            Command::Release(a) => a.json,
            Command::Extend(a) => a.json,
            Command::Status(a) => a.json,
            Command::Cluster(c) => c.json(),
            Command::Bench(a) => a.json,
            Command::Demo(a) => a.json,
        }
    }

    /// Runs the command; the exit code on success (`exec`: the command's).
    fn run(&self) -> Result<u8, CliError> {
        let done = match self {
            Command::Exec(a) => return cmd::exec::run(a),
            Command::Reaper(a) => return Ok(deadman::reaper(a)),
            Command::Trampoline(a) => return Ok(deadman::run_command(a)),
            Command::Acquire(a) => cmd::acquire::run(a),
            Command::Release(a) => cmd::release::run(a),
            Command::Extend(a) => cmd::extend::run(a),
            Command::Status(a) => cmd::status::run(a),
            Command::Cluster(cmd::cluster::Command::Up(a)) => cmd::cluster::up::run(a),
            Command::Cluster(cmd::cluster::Command::Down(a)) => cmd::cluster::down::run(a),
            Command::Cluster(cmd::cluster::Command::Status(a)) => cmd::cluster::status::run(a),
            Command::Bench(a) => cmd::bench::run(a),
            Command::Demo(a) => cmd::demo::run(a),
        };
        done.map(|()| exit::OK)
    }
}

fn main() -> ExitCode {
    // A bug must still end as one line, not a panic message and a backtrace.
    panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        output::note(&output::one_line(&format!(
            "internal error{place}: {what} (a bug in muxlock: please report it)"
        )));
    }));
    let cli = match parser()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(cli) => cli,
        Err(e) => return ExitCode::from(usage(&e)),
    };
    let json = cli.command.json();
    match panic::catch_unwind(AssertUnwindSafe(|| cli.command.run())) {
        Ok(Ok(code)) => ExitCode::from(code),
        Ok(Err(e)) => {
            output::report(&e, json);
            ExitCode::from(e.code)
        }
        Err(_) => ExitCode::from(exit::SOFTWARE),
    }
}

/// The command line's parser, each subcommand's usage line fixed to the one its help shows.
///
/// clap's usage line in an error names the arguments already given, and an option set by its environment variable
/// counts as given: with MUXLOCK_NODES set, `muxlock acquire job` would answer `Usage: muxlock acquire --ttl <DUR>
/// --nodes <URL,...> <RESOURCE>`, as if --nodes were required. The help's usage line names the required ones only.
fn parser() -> clap::Command {
    let mut cli = Cli::command();
    // Built first, so that each subcommand knows its full name (`muxlock cluster up`).
    cli.build();
    with_help_usage(cli)
}

/// `command` with the usage line of each of its subcommands (and theirs) set to the help's.
fn with_help_usage(mut command: clap::Command) -> clap::Command {
    let names: Vec<String> = command
        .get_subcommands()
        .map(|sub| sub.get_name().to_owned())
        .collect();
    for name in names {
        command = command.mut_subcommand(name, |sub| {
            let mut sub = with_help_usage(sub);
            let usage = sub.render_usage().to_string();
            let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage).to_owned();
            sub.override_usage(usage)
        });
    }
    command
}

/// Prints clap's message for a parse failure (or the help or version it was asked for) and returns the exit code:
/// 0 for `--help` and `--version`, EX_USAGE for everything else.
fn usage(e: &clap::Error) -> u8 {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = output::print(&e.render().to_string());
            exit::OK
        }
        _ => {
            // clap's own rendering (usage line and hint included), with any URL's credentials hidden.
            let text = output::scrub(&e.render().to_string());
            eprint!("{text}");
            exit::USAGE
        }
    }
}
