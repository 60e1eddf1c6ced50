//! `muxlock cluster down`: stops exactly the recorded nodes, then removes their data and the record.

use clap::Args as ClapArgs;
use serde::Serialize;

use crate::exit::{self, CliError};
use crate::output;
use crate::servers::stop;
use crate::state;

/// Stop the recorded nodes and remove their data and the record.
///
/// Stops exactly the recorded redis-server processes (by PID and start time, never by name), then removes their
/// data and the record. Does nothing, successfully, when no cluster is recorded.
#[derive(ClapArgs)]
pub struct Args {
    /// Print a JSON object instead of a sentence.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Stopped {
    state_file: String,
    stopped: Vec<StoppedNode>,
}

#[derive(Serialize)]
struct StoppedNode {
    url: String,
    pid: u32,
    /// Whether it was running (false: it had exited already).
    was_running: bool,
}

/// Runs the command.
///
/// # Errors
///
/// [`exit::CANTCREAT`] while another `cluster up` is still starting the cluster; [`exit::OSERR`] if a node could
/// not be stopped (the record is kept, to try again).
pub fn run(args: &Args) -> Result<(), CliError> {
    let dir = state::dir()?;
    let Some(cluster) = state::load(&dir)? else {
        let doc = Stopped {
            state_file: state::describe(&dir),
            stopped: Vec::new(),
        };
        output::emit(args.json, &doc, String::new)?;
        if !args.json {
            output::note(&format!(
                "no local cluster is recorded ({}): nothing to stop",
                state::describe(&dir)
            ));
        }
        return Ok(());
    };
    if cluster.is_being_started() {
        return Err(CliError::new(
            exit::CANTCREAT,
            "cluster",
            format!(
                "`muxlock cluster up` (pid {}) is still starting this cluster: run `cluster down` once it is done",
                cluster.owner_pid
            ),
        ));
    }
    let procs: Vec<(u32, u64)> = cluster
        .nodes
        .iter()
        .map(|n| (n.pid, n.start_ticks))
        .collect();
    let running: Vec<bool> = cluster.nodes.iter().map(|n| n.is_alive()).collect();
    let left = stop(&procs);
    if !left.is_empty() {
        let pids: Vec<String> = left.iter().map(|(pid, _)| pid.to_string()).collect();
        return Err(CliError::new(
            exit::OSERR,
            "os",
            format!(
                "could not stop redis-server process(es) {} even with SIGKILL; the record {} is kept",
                pids.join(", "),
                state::describe(&dir)
            ),
        ));
    }
    state::remove(&dir).map_err(|e| state::cannot_write(&dir, &e))?;
    let doc = Stopped {
        state_file: state::describe(&dir),
        stopped: cluster
            .nodes
            .iter()
            .zip(&running)
            .map(|(n, &was_running)| StoppedNode {
                url: n.url.clone(),
                pid: n.pid,
                was_running,
            })
            .collect(),
    };
    let count = running.iter().filter(|&&r| r).count();
    output::emit(args.json, &doc, || {
        let pids: Vec<String> = doc.stopped.iter().map(|n| n.pid.to_string()).collect();
        format!(
            "stopped {count} of {} nodes (pids {}); removed their data and {}\n",
            doc.stopped.len(),
            pids.join(" "),
            doc.state_file
        )
    })
}
