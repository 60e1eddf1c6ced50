//! `CLUSTER SLOTS` (Redis >= 3.0; deprecated by 7.0 in favour of `CLUSTER SHARDS`) into a [`SlotMap`].
//!
//! The reply is an array of ranges: `[start, end, master, replica, ...]`, each node `[endpoint, port, id,
//! metadata]`. The endpoint is the preferred one: a null means the host the command went to, `?` an unknown
//! one; old servers send `""` for a node that does not know its own address, read as the same host. The id
//! came with Redis 4.0 and the metadata (hostname, ip: a flat array in RESP2, a map in RESP3) with 7.0: both are
//! optional. A master owning several ranges appears once per range; its ranges are gathered into one shard by
//! its id (by its address where there is no id).
//!
//! The server leaves out failed replicas, and replicas whose replication offset it has not yet seen move from 0
//! (Redis 7.0's `isReplicaAvailable`: a replica of a master that took no write yet; seen here in
//! `tests/cluster/slot_map.rs`); `CLUSTER SHARDS` lists every replica, with its health.

use super::reply::{self, MapError};
use super::slot_map::{ClusterNode, Endpoint, Health, Shard, SlotMap, SlotRange};
use crate::resp::Value;

impl SlotMap {
    /// Reads a `CLUSTER SLOTS` reply, in RESP2 or RESP3.
    ///
    /// # Errors
    /// [`MapError::Refused`] for an error reply (e.g. cluster support disabled); [`MapError::Malformed`] naming the
    /// faulty part otherwise. Never panics, whatever `reply` holds.
    pub fn from_slots_reply(reply: &Value) -> Result<SlotMap, MapError> {
        if let Some(refused) = reply::refused(reply) {
            return Err(refused);
        }
        let mut shards: Vec<Shard> = Vec::new();
        let mut ranges = Vec::new();
        for (i, entry) in reply::array(reply)?.iter().enumerate() {
            let (start, end, master, replicas) =
                range(entry).map_err(|e| e.within(format!("range {i}")))?;
            let same = |s: &Shard| match (&s.master.id, &master.id) {
                (Some(a), Some(b)) => a == b,
                _ => s.master.endpoint == master.endpoint && s.master.port == master.port,
            };
            let shard = match shards.iter().position(same) {
                Some(known) => {
                    for replica in replicas {
                        if !shards[known].replicas.contains(&replica) {
                            shards[known].replicas.push(replica);
                        }
                    }
                    known
                }
                None => {
                    shards.push(Shard { master, replicas });
                    shards.len() - 1
                }
            };
            ranges.push(SlotRange { start, end, shard });
        }
        SlotMap::new(shards, ranges)
    }
}

/// One range entry: its slots, master and replicas.
fn range(entry: &Value) -> Result<(u16, u16, ClusterNode, Vec<ClusterNode>), MapError> {
    let items = reply::array(entry)?;
    let [start, end, master, replicas @ ..] = items else {
        return Err(MapError::malformed("expected [start, end, master, ...]"));
    };
    let start = reply::slot(start).map_err(|e| e.within("start"))?;
    let end = reply::slot(end).map_err(|e| e.within("end"))?;
    let master = node(master).map_err(|e| e.within("master"))?;
    let replicas = replicas
        .iter()
        .enumerate()
        .map(|(i, r)| node(r).map_err(|e| e.within(format!("replica {i}"))))
        .collect::<Result<_, _>>()?;
    Ok((start, end, master, replicas))
}

/// `[endpoint, port, id?, metadata?, ...]`.
fn node(value: &Value) -> Result<ClusterNode, MapError> {
    let items = reply::array(value)?;
    let [endpoint, port, rest @ ..] = items else {
        return Err(MapError::malformed("expected [endpoint, port, ...]"));
    };
    let endpoint = match reply::text_or_null(endpoint).map_err(|e| e.within("endpoint"))? {
        None => Endpoint::SameHost,
        Some(bytes) => Endpoint::from_announced(
            std::str::from_utf8(bytes)
                .map_err(|_| MapError::malformed("expected UTF-8 text").within("endpoint"))?,
        ),
    };
    let port = reply::port(port).map_err(|e| e.within("port"))?;
    let id = match rest.first() {
        Some(id) => Some(reply::utf8(id).map_err(|e| e.within("id"))?.to_owned()),
        None => None,
    };
    if let Some(metadata) = rest.get(1) {
        // Read only to check its shape: the preferred endpoint above is what clients dial.
        reply::pairs(metadata).map_err(|e| e.within("metadata"))?;
    }
    Ok(ClusterNode {
        id: id.filter(|id| !id.is_empty()),
        endpoint,
        port: Some(port),
        tls_port: None,
        health: Health::Unknown,
    })
}
