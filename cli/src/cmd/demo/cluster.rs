//! The cluster under the demo: given nodes, the running local cluster, or one started here; the faults
//! (kill, restart, pause, resume) at fixed fractions of the run; and the clean-up that leaves the nodes as they
//! were found.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::Demo;
use crate::duration;
use crate::exit::{self, CliError};
use crate::procs;
use crate::servers;
use crate::state::{self, ClusterState};

/// A node as the demo knows it: enough to kill, restart and pause it.
#[derive(Clone)]
pub(super) struct Node {
    pub(super) url: String,
    pub(super) port: u16,
    pub(super) pid: u32,
    pub(super) start_ticks: u64,
    pub(super) dir: PathBuf,
    pub(super) state: NodeState,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum NodeState {
    Up,
    Killed,
    Paused,
}

impl NodeState {
    pub(super) fn word(self) -> &'static str {
        match self {
            NodeState::Up => "up",
            NodeState::Killed => "DOWN",
            NodeState::Paused => "PAUSED",
        }
    }
}

/// The cluster under the demo.
pub(super) struct Cluster {
    pub(super) urls: Vec<String>,
    /// The nodes this process may kill and pause: empty with `--nodes`.
    pub(super) nodes: Vec<Node>,
    /// The recorded cluster, when the nodes are the local cluster's (rewritten after a restart).
    pub(super) record: Option<(PathBuf, ClusterState)>,
    /// This demo started it: it stops it at the end.
    pub(super) started_here: bool,
    pub(super) redis_server: PathBuf,
    /// When the nodes were ready.
    pub(super) ready_at: Instant,
}

impl Demo<'_> {
    /// The nodes: given ones, the running local cluster, or a new one.
    pub(super) fn cluster(&mut self) -> Result<Cluster, CliError> {
        let given = self.args.conn.nodes.iter().any(|n| !n.trim().is_empty());
        if given {
            let urls = self.args.conn.urls()?;
            self.screen.line(&format!(
                "using the {} given nodes; node faults skipped (they are not this machine's local cluster)",
                urls.len()
            ));
            return Ok(Cluster {
                urls,
                nodes: Vec::new(),
                record: None,
                started_here: false,
                redis_server: PathBuf::new(),
                ready_at: Instant::now(),
            });
        }
        let dir = state::dir()?;
        if let Some(existing) = state::load(&dir)? {
            if !existing.is_being_started() && existing.nodes.iter().all(|n| n.is_alive()) {
                self.screen.line(&format!(
                    "using the running local cluster ({} nodes, {}); it is left running",
                    existing.nodes.len(),
                    state::describe(&dir)
                ));
                return Ok(Cluster {
                    urls: existing.nodes.iter().map(|n| n.url.clone()).collect(),
                    nodes: nodes_of(&existing),
                    redis_server: PathBuf::from(&existing.redis_server),
                    record: Some((dir, existing)),
                    started_here: false,
                    ready_at: Instant::now(),
                });
            }
            if existing.nodes.iter().any(|n| n.is_alive()) {
                return Err(CliError::new(
                    exit::UNAVAILABLE,
                    "unavailable",
                    format!(
                        "the local cluster recorded in {} is only partly running: `muxlock cluster down`, then \
                         `muxlock demo` again",
                        state::describe(&dir)
                    ),
                ));
            }
        }
        let asked = Instant::now();
        let started = servers::start(&dir, &[None; 5], None, false)?;
        self.screen.line(&format!(
            "started a local cluster of {} redis-server nodes in {} (appendonly yes, appendfsync always: every \
             write on disk before the reply); recorded in {}",
            started.nodes.len(),
            duration::human(asked.elapsed()),
            state::describe(&dir)
        ));
        Ok(Cluster {
            urls: started.nodes.iter().map(|n| n.url.clone()).collect(),
            nodes: nodes_of(&started),
            redis_server: PathBuf::from(&started.redis_server),
            record: Some((dir, started)),
            started_here: true,
            ready_at: Instant::now(),
        })
    }

    /// Applies one fault; says what happened.
    pub(super) fn fault(&mut self, cluster: &mut Cluster, fault: Fault) -> String {
        match fault {
            Fault::Kill(i) => {
                let others = cluster.nodes.len() - 1;
                let node = &mut cluster.nodes[i];
                if procs::is_alive(node.pid, node.start_ticks) {
                    let _ = procs::signal(node.pid, Signal::KILL);
                    procs::wait_gone(&[(node.pid, node.start_ticks)], Duration::from_secs(5));
                }
                node.state = NodeState::Killed;
                format!(
                    "node {} ({}) killed with SIGKILL: the other {} are a majority, locks go on",
                    i + 1,
                    node.url,
                    others
                )
            }
            Fault::Restart(i) => match restart(cluster, i) {
                Ok(took) => format!(
                    "node {} restarted in {} on its port and data: its append-only file brought back the locks it \
                     held; the restart guard sees a new run_id",
                    i + 1,
                    duration::human(took)
                ),
                Err(e) => format!("node {} could not be restarted: {e}", i + 1),
            },
            Fault::Pause(i) => {
                let node = &mut cluster.nodes[i];
                let _ = procs::signal(node.pid, Signal::STOP);
                node.state = NodeState::Paused;
                format!(
                    "node {} ({}) paused with SIGSTOP: it accepts connections but answers nothing; rounds decide \
                     without it",
                    i + 1,
                    node.url
                )
            }
            Fault::Resume(i) => {
                let node = &mut cluster.nodes[i];
                let _ = procs::signal(node.pid, Signal::CONT);
                node.state = NodeState::Up;
                format!("node {} resumed with SIGCONT", i + 1)
            }
        }
    }

    /// Resumes paused nodes and restarts killed ones (a running cluster is left as it was found), or stops the
    /// cluster this demo started.
    pub(super) fn clean_up(&mut self, cluster: &mut Cluster) {
        for node in &mut cluster.nodes {
            if node.state == NodeState::Paused {
                let _ = procs::signal(node.pid, Signal::CONT);
                node.state = NodeState::Up;
            }
        }
        if cluster.started_here {
            let procs: Vec<(u32, u64)> = cluster
                .nodes
                .iter()
                .filter(|n| n.state != NodeState::Killed)
                .map(|n| (n.pid, n.start_ticks))
                .collect();
            let left = servers::stop(&procs);
            if let Some((dir, _)) = &cluster.record {
                if left.is_empty() {
                    let _ = state::remove(dir);
                    self.screen
                        .line("stopped the cluster this demo started and removed its data");
                } else {
                    self.screen.line(&format!(
                        "could not stop {} node(s): `muxlock cluster down` stops them",
                        left.len()
                    ));
                }
            }
            return;
        }
        for i in 0..cluster.nodes.len() {
            if cluster.nodes[i].state == NodeState::Killed {
                match restart(cluster, i) {
                    Ok(_) => self
                        .screen
                        .line(&format!("node {} restarted, as it was found", i + 1)),
                    Err(e) => self
                        .screen
                        .line(&format!("node {} could not be restarted: {e}", i + 1)),
                }
            }
        }
    }
}

fn nodes_of(cluster: &ClusterState) -> Vec<Node> {
    cluster
        .nodes
        .iter()
        .map(|n| Node {
            url: n.url.clone(),
            port: n.port,
            pid: n.pid,
            start_ticks: n.start_ticks,
            dir: n.dir.clone(),
            state: NodeState::Up,
        })
        .collect()
}

/// Starts node `i` again on its port and data directory, and updates the record.
fn restart(cluster: &mut Cluster, i: usize) -> Result<Duration, String> {
    let started = Instant::now();
    let node = &cluster.nodes[i];
    let tls = cluster.record.as_ref().and_then(|(_, r)| r.tls.as_ref());
    let record = servers::start_node(&cluster.redis_server, &node.dir, Some(node.port), tls)?;
    let node = &mut cluster.nodes[i];
    node.pid = record.pid;
    node.start_ticks = record.start_ticks;
    node.state = NodeState::Up;
    if let Some((dir, state)) = &mut cluster.record {
        if let Some(slot) = state.nodes.get_mut(i) {
            *slot = record;
        }
        let _ = state::save(dir, state);
    }
    Ok(started.elapsed())
}

#[derive(Clone, Copy)]
pub(super) enum Fault {
    Kill(usize),
    Restart(usize),
    Pause(usize),
    Resume(usize),
}

/// When each fault happens: node 2 killed at 25 % and restarted at 45 %, node 4 paused at 60 % and resumed at
/// 80 %. None with fewer than 3 nodes (one down would leave no majority to show).
pub(super) fn fault_plan(d: Duration, nodes: usize) -> Vec<(Duration, Fault)> {
    if nodes < 3 {
        return Vec::new();
    }
    let (killed, paused) = (1, (nodes - 2).max(2).min(nodes - 1));
    vec![
        (d.mul_f64(0.25), Fault::Kill(killed)),
        (d.mul_f64(0.45), Fault::Restart(killed)),
        (d.mul_f64(0.60), Fault::Pause(paused)),
        (d.mul_f64(0.80), Fault::Resume(paused)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_need_a_majority_left() {
        assert!(fault_plan(Duration::from_secs(8), 2).is_empty());
        let plan = fault_plan(Duration::from_secs(8), 5);
        assert!(matches!(plan[0].1, Fault::Kill(1)));
        assert!(matches!(plan[2].1, Fault::Pause(3)));
        let plan = fault_plan(Duration::from_secs(8), 3);
        assert!(matches!(plan[2].1, Fault::Pause(2)));
    }
}
