//! `cluster up --shards K`: a local Redis Cluster of K masters made of nodes already started with
//! `--cluster-enabled yes` (each with a bus port of its own), as `redis-cli --cluster create` would, by hand.

use std::thread;
use std::time::{Duration, Instant};

use crate::duration;
use crate::redis::{self, Client};
use crate::state::NodeRecord;

/// How long a member's nodes may take to agree they form one cluster.
const FORM_TIMEOUT: Duration = Duration::from_secs(30);

/// Makes `nodes` (started with `--cluster-enabled yes`) one Redis Cluster: distinct config epochs, `CLUSTER
/// MEET` with their bus ports, an even share of the slots each, then waits until every node says
/// `cluster_state:ok` and knows them all. Then provisions the persistence marker on the master of its slot (the
/// others get the restart window: the marker key lives in one slot).
pub fn form_cluster(nodes: &[(NodeRecord, u16)]) -> Result<(), String> {
    const SLOTS: usize = 16_384;
    let k = nodes.len();
    let client = |port: u16| {
        Client::connect(port, None, Duration::from_secs(5))
            .map_err(|e| format!("node on port {port}: {e}"))
    };
    let ok = |port: u16, command: &[&[u8]]| -> Result<(), String> {
        let replies = client(port)?
            .pipeline(&[command])
            .map_err(|e| format!("node on port {port}: {e}"))?;
        match replies.first() {
            Some(muxlock::resp::Value::SimpleString(s)) if &s[..] == b"OK" => Ok(()),
            other => Err(format!(
                "node on port {port}: {} answered {other:?}",
                String::from_utf8_lossy(command[0])
            )),
        }
    };
    let range = |i: usize| (i * SLOTS / k, (i + 1) * SLOTS / k - 1);
    for (i, (node, _)) in nodes.iter().enumerate() {
        let epoch = (i + 1).to_string();
        ok(
            node.port,
            &[b"CLUSTER", b"SET-CONFIG-EPOCH", epoch.as_bytes()],
        )?;
        let (start, end) = range(i);
        let (start, end) = (start.to_string(), end.to_string());
        ok(
            node.port,
            &[
                b"CLUSTER",
                b"ADDSLOTSRANGE",
                start.as_bytes(),
                end.as_bytes(),
            ],
        )?;
    }
    let first = nodes[0].0.port;
    for (node, bus) in &nodes[1..] {
        let (port, bus) = (node.port.to_string(), bus.to_string());
        ok(
            first,
            &[
                b"CLUSTER",
                b"MEET",
                b"127.0.0.1",
                port.as_bytes(),
                bus.as_bytes(),
            ],
        )?;
    }
    let deadline = Instant::now() + FORM_TIMEOUT;
    for (node, _) in nodes {
        loop {
            let info = client(node.port)?
                .pipeline(&[&[b"CLUSTER", b"INFO"]])
                .ok()
                .and_then(|r| r.first().and_then(redis::text));
            let known = info
                .as_deref()
                .and_then(|i| redis::info_field(i, "cluster_known_nodes"));
            let state = info
                .as_deref()
                .and_then(|i| redis::info_field(i, "cluster_state"));
            if state == Some("ok") && known == Some(&k.to_string()[..]) {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the cluster of ports {} did not form within {} (node {}: state {state:?}, {known:?} nodes known)",
                    nodes
                        .iter()
                        .map(|(n, _)| n.port.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                    duration::human(FORM_TIMEOUT),
                    node.port
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
    let slot = usize::from(muxlock::net::cluster::key_slot(
        muxlock::redlock::PERSIST_MARKER_KEY.as_bytes(),
    ));
    let owner = (0..k).find(|&i| {
        let (s, e) = range(i);
        (s..=e).contains(&slot)
    });
    if let Some(i) = owner {
        redis::provision_marker(nodes[i].0.port, None);
    }
    Ok(())
}
