//! `CLUSTER SHARDS` (Redis >= 7.0) into a [`SlotMap`].
//!
//! The reply is an array of shards; each shard is a map (RESP3) or a flat array of key/value pairs (RESP2) with
//! `slots`, a flat array of `start, end` pairs, and `nodes`, an array of node maps: `id`, `port` and/or
//! `tls-port`, `ip`, `endpoint` (the preferred endpoint: an empty string means the host the command went to, `?`
//! an unknown one), `hostname`, `role` (`master` or `replica`), `replication-offset`, `health` (`online`,
//! `failed`, `loading`). Unknown keys are skipped, so later servers may add some.
//!
//! A master that owns no slot is a shard of its own in the map (a new node; or, in Redis 7.0, a master killed
//! and replaced by its replica, listed `failed` until it rejoins as a replica). A shard with slots needs a master. Should a shard list two (seen only in hand-made replies), the first one
//! reported `online` is taken, else the first.

use super::reply::{self, MapError};
use super::slot_map::{ClusterNode, Endpoint, Health, Shard, SlotMap, SlotRange};
use crate::resp::Value;

impl SlotMap {
    /// Reads a `CLUSTER SHARDS` reply, in RESP2 or RESP3.
    ///
    /// # Errors
    /// [`MapError::Refused`] for an error reply (before Redis 7.0 the command is unknown: ask `CLUSTER SLOTS`
    /// then); [`MapError::Malformed`] naming the faulty part otherwise. Never panics, whatever `reply` holds.
    pub fn from_shards_reply(reply: &Value) -> Result<SlotMap, MapError> {
        if let Some(refused) = reply::refused(reply) {
            return Err(refused);
        }
        let mut shards = Vec::new();
        let mut ranges = Vec::new();
        for (i, entry) in reply::array(reply)?.iter().enumerate() {
            let (shard, slots) = shard(entry).map_err(|e| e.within(format!("shard {i}")))?;
            let Some(shard) = shard else {
                if slots.is_empty() {
                    continue; // a shard of replicas whose master is gone: nothing to route to
                }
                return Err(MapError::malformed("a shard with slots has no master")
                    .within(format!("shard {i}")));
            };
            ranges.extend(slots.into_iter().map(|(start, end)| SlotRange {
                start,
                end,
                shard: shards.len(),
            }));
            shards.push(shard);
        }
        SlotMap::new(shards, ranges)
    }
}

/// A shard's master and replicas (`None` without a master), and its slot ranges `(start, end)`.
type ShardEntry = (Option<Shard>, Vec<(u16, u16)>);

/// One shard of the reply.
fn shard(entry: &Value) -> Result<ShardEntry, MapError> {
    let mut slots = None;
    let mut nodes = None;
    for (key, value) in reply::pairs(entry)? {
        match reply::text(key).map_err(|e| e.within("a key"))? {
            b"slots" => slots = Some(slot_pairs(value).map_err(|e| e.within("slots"))?),
            b"nodes" => nodes = Some(reply::array(value).map_err(|e| e.within("nodes"))?),
            _ => {}
        }
    }
    let slots = slots.ok_or_else(|| MapError::malformed("no \"slots\""))?;
    let nodes = nodes.ok_or_else(|| MapError::malformed("no \"nodes\""))?;
    let mut master: Option<ClusterNode> = None;
    let mut replicas = Vec::new();
    for (i, value) in nodes.iter().enumerate() {
        let (node, is_master) = node(value).map_err(|e| e.within(format!("nodes[{i}]")))?;
        if !is_master {
            replicas.push(node);
        } else if master
            .as_ref()
            .is_none_or(|m| m.health != Health::Online && node.health == Health::Online)
        {
            // A master not chosen is dropped: no slot of this shard is routed to it.
            master = Some(node);
        }
    }
    Ok((master.map(|master| Shard { master, replicas }), slots))
}

/// `[start, end, start, end, ...]`.
fn slot_pairs(value: &Value) -> Result<Vec<(u16, u16)>, MapError> {
    let flat = reply::array(value)?;
    if flat.len() % 2 != 0 {
        return Err(MapError::malformed(
            "expected start/end pairs (an array of even length)",
        ));
    }
    flat.chunks_exact(2)
        .enumerate()
        .map(|(i, pair)| {
            let start = reply::slot(&pair[0]).map_err(|e| e.within(2 * i))?;
            let end = reply::slot(&pair[1]).map_err(|e| e.within(2 * i + 1))?;
            Ok((start, end))
        })
        .collect()
}

/// One node map, and whether it is the master.
fn node(value: &Value) -> Result<(ClusterNode, bool), MapError> {
    let mut id = None;
    let mut port = None;
    let mut tls_port = None;
    let mut ip = None;
    let mut endpoint = None;
    let mut role = None;
    let mut health = Health::Unknown;
    for (key, value) in reply::pairs(value)? {
        let key = reply::text(key).map_err(|e| e.within("a key"))?;
        let at = |e: MapError| e.within(String::from_utf8_lossy(key));
        match key {
            b"id" => id = Some(reply::utf8(value).map_err(at)?.to_owned()),
            b"port" => port = Some(reply::port(value).map_err(at)?),
            b"tls-port" => tls_port = Some(reply::port(value).map_err(at)?),
            b"ip" => ip = Some(reply::utf8(value).map_err(at)?),
            b"endpoint" => endpoint = Some(reply::utf8(value).map_err(at)?),
            b"role" => role = Some(reply::text(value).map_err(at)?),
            b"health" => {
                health = match reply::text(value).map_err(at)? {
                    b"online" => Health::Online,
                    // The docs say `failed`; Redis 7.0 and Valkey 9.1 send `fail`.
                    b"failed" | b"fail" => Health::Failed,
                    b"loading" => Health::Loading,
                    _ => Health::Unknown,
                }
            }
            _ => {}
        }
    }
    let is_master = match role {
        Some(b"master" | b"primary") => true,
        Some(b"replica" | b"slave") => false,
        Some(_) => return Err(MapError::malformed("role is neither master nor replica")),
        None => return Err(MapError::malformed("no \"role\"")),
    };
    if port.is_none() && tls_port.is_none() {
        return Err(MapError::malformed("neither \"port\" nor \"tls-port\""));
    }
    // The preferred endpoint; servers that send none have only the IP.
    let announced = endpoint
        .or(ip)
        .ok_or_else(|| MapError::malformed("neither \"endpoint\" nor \"ip\""))?;
    let node = ClusterNode {
        id: id.filter(|id| !id.is_empty()),
        endpoint: Endpoint::from_announced(announced),
        port,
        tls_port,
        health,
    };
    Ok((node, is_master))
}
