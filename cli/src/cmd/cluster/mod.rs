//! `muxlock cluster up|down|status`: N local `redis-server` masters for trying muxlock out, recorded where the
//! other commands find them (see [`crate::state`]).
//!
//! The nodes listen on 127.0.0.1 only, run as daemons in their own session (a closed terminal does not stop them),
//! and persist every write before answering (`--appendonly yes --appendfsync always`), so that a node that
//! restarts remembers the locks it granted. With `cluster up --tls` they listen for TLS only, with a CA made for the
//! cluster (see [`crate::certs`]); the record names its files, so that every command using the cluster (and this
//! module's housekeeping client) trusts it with no flag. `cluster down` stops exactly the recorded processes, by PID and start
//! time, never by name.

pub mod down;
pub mod status;
pub mod up;

use clap::Subcommand;

/// The `cluster` subcommands. (Their help is their `Args`' doc: a doc comment here would replace it.)
#[derive(Subcommand)]
pub enum Command {
    Up(up::Args),
    Down(down::Args),
    Status(status::Args),
}

impl Command {
    /// Whether `--json` was given.
    pub fn json(&self) -> bool {
        match self {
            Command::Up(a) => a.json,
            Command::Down(a) => a.json,
            Command::Status(a) => a.json,
        }
    }
}
