//! `muxlock cluster up`: starts the local nodes, in parallel, and records each as soon as it runs.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args as ClapArgs;
use serde::Serialize;

use crate::duration;
use crate::exit::CliError;
use crate::output;
use crate::servers::{APPENDFSYNC, start_members};
use crate::state::{self, TlsFiles};

/// Start N local redis-server nodes and record them for the other commands.
///
/// Each node listens on 127.0.0.1, keeps its data in the state directory (MUXLOCK_STATE_DIR, else
/// $XDG_STATE_HOME/muxlock, else ~/.local/state/muxlock) and persists every write before answering (appendonly
/// yes, appendfsync always): a restarted node remembers its locks. Prints the nodes' URLs. Refuses to start a second
/// cluster while one is running.
///
/// With --tls the nodes speak TLS only (rediss://), with certificates from a CA made for this cluster alone;
/// the commands that use the local cluster trust that CA and present its client certificate by themselves.
#[derive(ClapArgs)]
#[command(
    after_help = "Example:\n  muxlock cluster up\n  muxlock acquire job --ttl 10s   # uses the local cluster\n  \
                  muxlock cluster up --tls -c 3   # rediss:// nodes, a throwaway CA in the state directory"
)]
pub struct Args {
    /// How many nodes.
    ///
    /// A majority of them must agree on each lock. -n, as in earlier versions, still works; everywhere else -n is --nonblock.
    #[arg(short = 'c', short_alias = 'n', long = "count", value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u16).range(1..=63))]
    pub count: u16,

    /// The first node's port; the others follow (P, P+1, ...).
    ///
    /// Default: free ports picked by the system.
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(u16).range(1..))]
    pub base_port: Option<u16>,

    /// Make each member a Redis Cluster of K masters.
    ///
    /// K nodes with --cluster-enabled yes, the 16,384 slots split evenly, printed as redis+cluster:// URLs: -c
    /// members of K masters each, for trying cluster members (a Redlock member per cluster; see the README,
    /// "Cluster members"). Not with --tls.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u16).range(1..=16))]
    pub shards: Option<u16>,

    /// TLS nodes (rediss://, no plain port) with a throwaway CA.
    ///
    /// A CA, a server certificate for 127.0.0.1 and localhost and a client certificate are made in the state
    /// directory (cluster/tls/, removed by `cluster down`). Commands without --nodes pick them up; with --nodes,
    /// pass the --tls-ca/--tls-cert/--tls-key that `cluster up` prints. Needs a redis-server built with TLS (BUILD_TLS=yes; Debian's is).
    #[arg(long)]
    pub tls: bool,

    /// The redis-server binary.
    ///
    /// Default: $REDIS_SERVER, else redis-server on PATH, /usr/bin or /usr/local/bin.
    #[arg(long, value_name = "PATH")]
    pub redis_server: Option<PathBuf>,

    /// Print a JSON object instead of the URLs.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Started<'a> {
    state_file: String,
    appendfsync: &'a str,
    /// The CA and client files of a TLS cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<&'a TlsFiles>,
    nodes: Vec<StartedNode<'a>>,
    /// The Redlock members' URLs (with --shards, one redis+cluster:// URL per cluster).
    members: &'a [String],
}

#[derive(Serialize)]
struct StartedNode<'a> {
    url: &'a str,
    port: u16,
    pid: u32,
    dir: &'a Path,
}

/// Runs the command.
///
/// # Errors
///
/// [`exit::CANTCREAT`] if a cluster is running already, the state cannot be written, the certificates cannot be
/// made, or a node does not start (the nodes that did are stopped again); [`exit::UNAVAILABLE`] without
/// redis-server, or with `--tls` and a redis-server built without TLS.
///
/// [`exit::CANTCREAT`]: crate::exit::CANTCREAT
/// [`exit::UNAVAILABLE`]: crate::exit::UNAVAILABLE
pub fn run(args: &Args) -> Result<(), CliError> {
    if args.shards.is_some() && args.tls {
        return Err(CliError::usage(
            "--shards with --tls is not supported yet: leave one out",
        ));
    }
    let per_member = args.shards.unwrap_or(1);
    let total = args.count.saturating_mul(per_member);
    let ports = match args.base_port {
        Some(base) => {
            let last = u32::from(base) + u32::from(total) - 1;
            if last > u32::from(u16::MAX) {
                return Err(CliError::usage(format!(
                    "--base-port {base} leaves no room for {} nodes: the last port would be {last}",
                    args.count
                )));
            }
            (0..total).map(|i| Some(base + i)).collect()
        }
        None => vec![None; usize::from(total)],
    };
    let dir = state::dir()?;
    let started = Instant::now();
    let cluster = start_members(
        &dir,
        &ports,
        args.redis_server.as_deref(),
        args.tls,
        args.shards,
    )?;
    let members = cluster.live_urls();
    let doc = Started {
        state_file: state::describe(&dir),
        appendfsync: APPENDFSYNC,
        tls: cluster.tls.as_ref(),
        nodes: cluster
            .nodes
            .iter()
            .map(|n| StartedNode {
                url: &n.url,
                port: n.port,
                pid: n.pid,
                dir: &n.dir,
            })
            .collect(),
        members: &members,
    };
    output::emit(args.json, &doc, || {
        members.iter().map(|m| format!("{m}\n")).collect()
    })?;
    if !args.json {
        output::note(&format!(
            "started {} redis-server nodes (appendonly yes, appendfsync {APPENDFSYNC}) in {}; recorded in {}. \
             Commands without --nodes use them; `muxlock cluster down` stops them.",
            cluster.nodes.len(),
            duration::human(started.elapsed()),
            state::describe(&dir)
        ));
        if let Some(tls) = &cluster.tls {
            output::note(&format!(
                "TLS only (no plain port), with a CA made for this cluster: commands without --nodes trust it and \
                 present its client certificate by themselves; with --nodes, add {}",
                tls.flags()
            ));
        }
    }
    Ok(())
}
