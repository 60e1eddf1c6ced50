//! `muxlock cluster status`: the recorded nodes, each with its process state, uptime, role and persistence.

use std::time::Duration;

use clap::Args as ClapArgs;
use serde::Serialize;

use crate::duration;
use crate::exit::{self, CliError};
use crate::output;
use crate::procs;
use crate::redis::{self, Client};
use crate::state::{self, NodeRecord, TlsFiles};

/// List the local cluster's nodes with their state, uptime, role and persistence.
///
/// State: up, down, paused or not answering; persistence: the node's appendfsync. Exits 0 when every node is up, 69 when some are not (or no cluster is recorded).
#[derive(ClapArgs)]
pub struct Args {
    /// Print a JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Status {
    state_file: String,
    status: String,
    created_unix_ms: u64,
    /// The CA and client files of a TLS cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<TlsFiles>,
    nodes: Vec<Node>,
}

#[derive(Serialize)]
struct Node {
    url: String,
    port: u16,
    pid: u32,
    /// `up`, `down`, `paused` (SIGSTOP) or `not_answering`.
    state: &'static str,
    uptime_s: Option<u64>,
    role: Option<String>,
    appendfsync: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Runs the command.
///
/// # Errors
///
/// [`exit::UNAVAILABLE`] when no cluster is recorded, or some node is not up (after printing the table).
pub fn run(args: &Args) -> Result<(), CliError> {
    let dir = state::dir()?;
    let Some(cluster) = state::load(&dir)? else {
        return Err(CliError::new(
            exit::UNAVAILABLE,
            "unavailable",
            format!(
                "no local cluster is recorded ({}): start one with `muxlock cluster up`",
                state::describe(&dir)
            ),
        ));
    };
    let doc = Status {
        state_file: state::describe(&dir),
        status: cluster.status.clone(),
        created_unix_ms: cluster.created_unix_ms,
        tls: cluster.tls.clone(),
        nodes: cluster
            .nodes
            .iter()
            .map(|n| probe(n, cluster.tls.as_ref()))
            .collect(),
    };
    output::emit(args.json, &doc, || table(&doc))?;
    if let (Some(tls), false) = (&doc.tls, args.json) {
        output::note(&format!(
            "TLS nodes: commands without --nodes use their CA and client certificate; with --nodes, add {}",
            tls.flags()
        ));
    }
    let down = doc.nodes.iter().filter(|n| n.state != "up").count();
    if down > 0 || doc.nodes.is_empty() {
        return Err(CliError::new(
            exit::UNAVAILABLE,
            "unavailable",
            format!(
                "{down} of {} nodes of the local cluster are not up",
                doc.nodes.len()
            ),
        )
        .after_output());
    }
    Ok(())
}

fn probe(node: &NodeRecord, tls: Option<&TlsFiles>) -> Node {
    let mut out = Node {
        url: node.url.clone(),
        port: node.port,
        pid: node.pid,
        state: "down",
        uptime_s: None,
        role: None,
        appendfsync: None,
        error: None,
    };
    if !node.is_alive() {
        return out;
    }
    if procs::stat(node.pid).is_some_and(|s| s.state == 'T') {
        out.state = "paused";
        return out;
    }
    let queried = Client::connect(node.port, tls, Duration::from_millis(500)).and_then(|mut c| {
        c.pipeline(&[
            &[b"INFO", b"server"],
            &[b"INFO", b"replication"],
            &[b"CONFIG", b"GET", b"appendfsync"],
        ])
    });
    match queried {
        Ok(replies) => {
            out.state = "up";
            let info = |i: usize| replies.get(i).and_then(redis::text).unwrap_or_default();
            let server = info(0);
            out.uptime_s =
                redis::info_field(&server, "uptime_in_seconds").and_then(|s| s.parse().ok());
            out.role = redis::info_field(&info(1), "role").map(str::to_owned);
            out.appendfsync = replies.get(2).and_then(redis::config_value);
        }
        Err(e) => {
            out.state = "not_answering";
            out.error = Some(e.to_string());
        }
    }
    out
}

fn table(doc: &Status) -> String {
    let width = doc
        .nodes
        .iter()
        .map(|n| n.url.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let mut out = format!(
        "{:<width$}  {:>8}  {:<13}  {:>8}  {:<7}  appendfsync\n",
        "node", "pid", "state", "uptime", "role"
    );
    let dash = || "-".to_owned();
    for n in &doc.nodes {
        let uptime = n.uptime_s.map_or_else(dash, |s| match s {
            0..60 => format!("{s}s"),
            _ => duration::human(Duration::from_secs(s)),
        });
        let line = format!(
            "{:<width$}  {:>8}  {:<13}  {:>8}  {:<7}  {}",
            n.url,
            n.pid,
            n.state.replace('_', " "),
            uptime,
            n.role.clone().unwrap_or_else(dash),
            n.appendfsync.clone().unwrap_or_else(dash)
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
